"""Judge a what-if replay against the baseline replay: did the change remove the spike?

The spike line comes from the steps before the window (the baseline replay's, or the logged
losses when the replay starts too close to the window): their median plus SPIKE_SIGMA robust
sigmas, the robust-z detector's alarm threshold, so "removed" means "no detector would have
fired". Sigma is the spread of first differences (a falling loss does not inflate it).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from tscope.analyzers.baseline import MAD_TO_SIGMA
from tscope.analyzers.detectors.robust_z import ROBUST_Z_ALARM_SIGMA

from tscope.model.replay import InterventionOutcome, ReplayStep

SPIKE_SIGMA = ROBUST_Z_ALARM_SIGMA
# The reference needs this many loss points before the window (the detectors' minimum history).
MIN_REFERENCE_POINTS = 8
REFERENCE_POINTS = 50


def spike_line(
    baseline: Sequence[ReplayStep],
    window_first: int,
    logged: tuple[np.ndarray, np.ndarray] | None = None,
) -> tuple[float, float] | None:
    """(reference median, spike line), or None when there is too little history."""
    before = [s.loss for s in baseline if s.step < window_first and math.isfinite(s.loss)]
    if len(before) < MIN_REFERENCE_POINTS and logged is not None:
        steps, values = logged
        keep = (steps < window_first) & np.isfinite(values)
        before = values[keep][-REFERENCE_POINTS:].tolist()
    if len(before) < MIN_REFERENCE_POINTS:
        return None
    values = np.asarray(before[-REFERENCE_POINTS:], dtype=np.float64)
    median = float(np.median(values))
    differences = np.abs(np.diff(values))
    sigma = MAD_TO_SIGMA * float(np.median(differences)) / math.sqrt(2.0)
    sigma = max(sigma, abs(median) * 1e-3, 1e-12)
    return median, median + SPIKE_SIGMA * sigma


def window_peak(steps: Sequence[ReplayStep], first: int, last: int) -> tuple[float, int | None]:
    """Highest loss over the window's trained steps (a non-finite loss counts as +inf)."""
    best, where = -math.inf, None
    for step in steps:
        if not first <= step.step <= last or step.update_skipped:
            continue
        value = step.loss if math.isfinite(step.loss) else math.inf
        if value > best:
            best, where = value, step.step
    return best, where


def judge(
    name: str,
    params: dict[str, object],
    baseline: Sequence[ReplayStep],
    what_if: Sequence[ReplayStep],
    window: tuple[int, int],
    reference: tuple[float, float] | None,
    checkpoint_step: int | None = None,
    own_level: bool = False,
) -> InterventionOutcome:
    """`own_level`: the what-if starts from another state (what-if "from"), whose loss level
    differs: its spike line is its own window median (the baseline's peak step and neighbours
    left out) plus the same noise band as the baseline's."""
    first, last = window
    peak, peak_step = window_peak(what_if, first, last)
    base_peak, base_step = window_peak(baseline, first, last)
    removed = False
    median = line = None
    if reference is not None:
        median, line = reference
        if own_level and base_step is not None:
            others = [
                s.loss
                for s in what_if
                if first <= s.step <= last
                and abs(s.step - base_step) > 1
                and not s.update_skipped
                and math.isfinite(s.loss)
            ]
            if others:
                band = line - median
                median = float(np.median(others))
                line = median + band
        removed = base_peak >= reference[1] and peak < line
    return InterventionOutcome(
        name=name,
        params=dict(params),
        peak_loss=peak,
        spike_removed=removed,
        peak_step=peak_step,
        baseline_peak_loss=base_peak,
        baseline_peak_step=base_step,
        spike_line=line,
        reference_median=median,
        checkpoint_step=checkpoint_step,
        losses=tuple((s.step, s.loss) for s in what_if if first <= s.step <= last),
    )
