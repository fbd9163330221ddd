"""Judge a what-if replay against the baseline replay: did the change remove the spike?

The spike line comes from the spike's neighbours: the NEIGHBOUR_POINTS losses right before the
window (the baseline replay's, or the logged losses when the replay starts too close to the
window). Their median is the pre-spike level; their noise is the robust spread of their first
differences (a falling loss does not inflate it, and neither does the run's early descent, which a
longer history would drag in: a 50-step history of a run 90 steps old put the line of the issue's
Llama run at 4.14, above its own 4.09 spike over neighbours at ~2.4-2.8). The line is the level
plus SPIKE_SIGMA noise sigmas, the robust-z detector's alarm threshold, so "a spike" means "a
detector would have fired"; a baseline that does not cross its own line has no spike to remove.
When the detectors' own reference (the BASELINE_WINDOW_POINTS logged losses before the window)
gives a lower line, that one is used: a spike the log's detectors found is one to remove.

How much of it a what-if removes is the fraction of the baseline's excess over its pre-spike
level that is gone, measured at the spike's own steps (those where the baseline crosses its line):
1 − (what-if loss − level) / (baseline peak − level) at the worst of them. A what-if that moves
the spike elsewhere keeps it: any what-if step above the line counts as remaining excess too,
while a what-if step under the line away from the spike is the loss's own noise, not the spike.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tscope.analyzers.baseline import BASELINE_WINDOW_POINTS, difference_sigma
from tscope.analyzers.detectors.robust_z import ROBUST_Z_ALARM_SIGMA
from tscope.model.replay import InterventionOutcome, ReplayStep

SPIKE_SIGMA = ROBUST_Z_ALARM_SIGMA
# The reference needs this many loss points before the window (the detectors' minimum history).
MIN_REFERENCE_POINTS = 8
# The neighbours the level and noise come from: 20 steps, enough for a median and a MAD of 19
# differences, short enough that a loss still falling steeply 50 steps back is not in it.
NEIGHBOUR_POINTS = 20
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
    """(pre-spike level, spike line) from the NEIGHBOUR_POINTS losses before the window, or
    None when there are fewer than MIN_REFERENCE_POINTS of them; the log detectors' own line
    (the BASELINE_WINDOW_POINTS logged losses before the window) when that one is lower."""
    history = np.empty(0)
    if logged is not None:
        steps, values = logged
        keep = (steps < window_first) & np.isfinite(values)
        history = values[keep][-BASELINE_WINDOW_POINTS:].astype(np.float64)
    before = [s.loss for s in baseline if s.step < window_first and math.isfinite(s.loss)]
    if len(before) < MIN_REFERENCE_POINTS:
        before = history[-NEIGHBOUR_POINTS:].tolist()
    if len(before) < MIN_REFERENCE_POINTS:
        return None
    values = np.asarray(before[-NEIGHBOUR_POINTS:], dtype=np.float64)
    median = float(np.median(values))
    reference = (median, median + SPIKE_SIGMA * difference_sigma(values))
    if history.size >= MIN_REFERENCE_POINTS:
        # A spike the log's detectors found is one to remove: with noisy neighbours the short
        # line can sit above it (a ×44 LR jump's 3.21 → 4.43 under a 20-point line of 4.5, where
        # the detectors' 50-point history made it 9.9 σ), and both what-ifs read "no spike".
        level = float(np.median(history))
        detectors = (level, level + SPIKE_SIGMA * difference_sigma(history))
        if detectors[1] < reference[1]:
            return detectors
    return reference


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
        spike_steps = _crossing_steps(baseline, first, last, reference[1])
        remaining = _remaining_peak(what_if, first, last, spike_steps, line, level)
        fraction = removed_fraction(base_peak, remaining, reference[0], level)
        # The baseline must cross its own line (the reference's, not the what-if's).
        effect = "no_spike" if not spike_steps else effect_of(fraction)
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


def _loss(step: ReplayStep) -> float:
    return step.loss if math.isfinite(step.loss) else math.inf


def _crossing_steps(steps: Sequence[ReplayStep], first: int, last: int, line: float) -> set[int]:
    """The window's trained steps above the line: the spike (a non-finite loss is above it)."""
    return {
        s.step
        for s in steps
        if first <= s.step <= last and not s.update_skipped and _loss(s) > line
    }


def _remaining_peak(
    what_if: Sequence[ReplayStep],
    first: int,
    last: int,
    spike_steps: set[int],
    line: float,
    level: float,
) -> float:
    """The what-if's highest loss at the spike's steps, or anywhere it crosses the line; its
    level when it trained on none of them (a skipped update leaves no excess behind)."""
    worst = level
    for step in what_if:
        if not first <= step.step <= last or step.update_skipped:
            continue
        value = _loss(step)
        if step.step in spike_steps or value > line:
            worst = max(worst, value)
    return worst


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
