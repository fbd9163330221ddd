"""Judge a what-if replay against the baseline replay: did the change remove the spike?

The spike line comes from the steps before the window (the baseline replay's, or the logged
losses when the replay starts too close to the window): their median plus SPIKE_SIGMA robust
sigmas, the robust-z detector's alarm threshold, so "removed" means "no detector would have
fired". Sigma is the spread of first differences (a falling loss does not inflate it).

The line decides whether there is a spike to remove; how much of it a what-if removes is the
fraction of the baseline's excess over its pre-spike level (the reference median) that is gone,
1 − (what-if peak − level) / (baseline peak − level). A what-if that takes a 4.09 peak to 2.50
next to neighbours at ~2.5 removed the spike even when its peak still sits a hair above a line
drawn from a noisy history; one that only trims the top has not.
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
# A what-if that removes at least this fraction of the baseline's excess removed the spike; one
# that removes at most KEPT_FRACTION kept it; in between it is partial. Four fifths back to the
# pre-spike level leaves a bump within the loss's own step-to-step noise at the fixtures' spikes
# (excess ≈ 20 σ, so 0.2 of it ≈ 4 σ, under the 6 σ alarm line).
REMOVED_FRACTION = 0.8
KEPT_FRACTION = 0.2


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
    median = line = fraction = None
    effect = "unjudged"
    if reference is not None:
        median, line = reference
        level = median
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
                level = float(np.median(others))
                line = level + band
        fraction = removed_fraction(base_peak, peak, reference[0], level)
        # The baseline must cross its own line (the reference's, not the what-if's).
        effect = "no_spike" if base_peak < reference[1] else effect_of(fraction)
        median = level
    return InterventionOutcome(
        name=name,
        params=dict(params),
        peak_loss=peak,
        spike_removed=effect == "removed",
        peak_step=peak_step,
        baseline_peak_loss=base_peak,
        baseline_peak_step=base_step,
        spike_line=line,
        reference_median=median,
        checkpoint_step=checkpoint_step,
        losses=tuple((s.step, s.loss) for s in what_if if first <= s.step <= last),
        removed_fraction=fraction,
        effect=effect,
    )


def removed_fraction(
    baseline_peak: float, what_if_peak: float, baseline_level: float, what_if_level: float
) -> float:
    """1 − (what-if excess over its level) / (baseline excess over its level), within [0, 1]; a
    non-finite baseline peak is removed entirely by any finite what-if peak."""
    excess = baseline_peak - baseline_level
    remaining = what_if_peak - what_if_level
    if not math.isfinite(what_if_peak):
        return 0.0
    if not math.isfinite(baseline_peak):
        return 1.0
    if excess <= 0.0:
        return 0.0 if remaining > 0.0 else 1.0
    return float(min(1.0, max(0.0, 1.0 - remaining / excess)))


def effect_of(fraction: float) -> str:
    if fraction >= REMOVED_FRACTION:
        return "removed"
    if fraction <= KEPT_FRACTION:
        return "kept"
    return "partial"
