"""loss_divergence and eval_divergence: the loss leaves its best level and does not come back."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.baseline import (
    MAD_TO_SIGMA,
    difference_sigma,
    per_read_only_array,
    ratio_above,
    rolling_median,
)
from tscope.analyzers.explainers.overfitting import overfitting_onset
from tscope.analyzers.impact import eval_held_text
from tscope.analyzers.loss_weights import rising_loss_weight
from tscope.analyzers.signals import fmt, loss_series, primary_loss
from tscope.model import Finding
from tscope.model.categories import Category
from tscope.model.metric_names import EVAL_LOSS

# Sustained above 1.5× the best smoothed loss so far: a healthy LM loss can bump by that much for
# a step or two (see spikes.TRANSIENT_MAX_RATIO) but never stays there; a run that does has lost
# what it learned. Wortsman et al. 2023 score LR sensitivity with min(loss, loss at init) for the
# same reason: past that level, training has diverged.
DIVERGENCE_RATIO = 1.5
# "Sustained": at least this many consecutive logged points, spanning this fraction of the logged steps.
DIVERGENCE_MIN_POINTS = 5
DIVERGENCE_MIN_FRACTION = 0.03
# A lower tier: the loss settled ≥ 15% above its best and stayed there for ≥ 10% of the logged
# steps through the end of the log — no blow-up, but what was learned is being lost (a warning; a
# healthy LM loss that bumps recovers within a few steps, see spikes.TRANSIENT_MAX_POINTS).
ELEVATED_RATIO = 1.15
ELEVATED_MIN_FRACTION = 0.10
# Smoothing before comparing with the best level, so one noisy point cannot set the best.
SMOOTHING_POINTS = 5
# The excursion is found where the (trailing-median) smoothed loss crosses the ratio, but it began
# earlier: its onset is the first point of the climb that leads there, walking back from the
# crossing while the raw loss stays above its best by more than RISE_MARGIN_FRACTION of the
# ratio's margin (2% of the best for a divergence, 0.6% for a settled rise) and by more than
# RISE_NOISE_SIGMAS robust σ of the run's noise before it. Found on synthetic logs
# (bench/synthetic_logs.py, a loss that climbs exponentially from a known step): the crossing sat
# 5–150 logged points after the climb began (a trailing median lags by half its window, and a
# slow climb takes a while to reach 1.5×), so every explainer that times a cause against the
# onset (an LR jump, the warm-up's end) measured its lead from the crossing instead. The noise is
# the larger of the step-to-step σ and the level's wander around its trend (`_settled_trend`, the
# window's last fifth left out as possibly the climb's): with autocorrelated noise the level sits
# above its best for stretches, and with the first one alone the walk back crossed them, 15–18
# steps early on 2 of 50 synthetic logs gone non-finite. The margin's floor was 10% of the ratio's
# margin (5% of the best): on low-noise logs (σ under 1% of the level) the walk then stopped 1–4
# steps after the climb had risen 3 σ clear of the noise; at 4% divergences dated right on the
# tuning seeds 0–1,499 went 209 -> 214 of 250, healthy logs warned 4/1,500 either way.
RISE_MARGIN_FRACTION = 0.04
RISE_NOISE_SIGMAS = 2.0
RISE_NOISE_POINTS = 50
# A climb "slow from its best point": the smoothed loss just before the crossing has already
# covered this share of the way from the best to the ratio (see `_climbing_since_best`).
SLOW_CLIMB_SHARE = 0.5
# ... and the smoothed level must stand this many σ of the raw loss's step-to-step noise (over
# the RISE_NOISE_POINTS before the excursion) above its best: a median of 5 has ~0.54 σ of noise,
# so 3 σ of the raw loss is ~5.6 of its own, held for DIVERGENCE_MIN_POINTS. An LM loss at 2-10
# nats with noise of 1-3% never meets this bound before the ratio's; a loss near zero does (an
# MLP memorizing its task at 0.01 with noise of 0.03, logged to MLflow: the excursion began at
# noise 11 steps before the LR jump's blow-up). At 5 σ one short synthetic log (20 points of a
# steep descent, whose differences inflate σ) was dated at its last point; bench dev and
# holdout7-12 headlines: 1 of 659 moved (to the planted ramp), none lost.
DIVERGENCE_NOISE_SIGMAS = 3.0
# Eval loss: a rise of 10% over its best, on at least two consecutive evals at the end of the run.
EVAL_RISE_RATIO = 1.10
EVAL_MIN_RISING_POINTS = 2


class DivergenceExplainer:
    name = "divergence"
    categories: tuple[str, ...] = (
        "loss_divergence",
        "eval_divergence",
    )
    defines = (
        Category(
            "loss_divergence",
            "symptom",
            "critical",
            "logs",
            "the loss diverging",
            "the loss leaves its best level for good",
            symptom_order=10,
        ),
        Category(
            "eval_divergence",
            "symptom",
            "warning",
            "logs",
            "the eval loss diverging from the training loss",
            "the eval loss rises while the train loss does not keep falling",
            symptom_order=70,
        ),
    )

    def run(self, evidence: Evidence) -> list[Finding]:
        findings = []
        loss = primary_loss(evidence.run)
        if loss is not None:
            steps, values = loss_series(evidence.run, loss)
            finding = _divergence(loss, steps, values, evidence)
            if finding is not None:
                findings.append(finding)
        # An eval rise while the train loss keeps falling is reported as overfitting instead.
        if (
            evidence.run.has(EVAL_LOSS)
            and loss != EVAL_LOSS
            and not overfitting_onset(evidence.run)
        ):
            steps, values = evidence.run.series(EVAL_LOSS)
            eval_finding = _eval_divergence(steps, values)
            if eval_finding is not None:
                findings.append(eval_finding)
        return findings


def smoothed(values: np.ndarray) -> np.ndarray:
    """Rolling median of the finite values; a non-finite point is +inf (the worst possible loss).
    Computed once per read-only loss series (six rules ask for the same run's loss_rise)."""
    return per_read_only_array(values, "smoothed", SMOOTHING_POINTS, lambda: _smoothed(values))


def _smoothed(values: np.ndarray) -> np.ndarray:
    finite = np.where(np.isfinite(values), values, np.nan)
    level = rolling_median(finite, SMOOTHING_POINTS, 1).copy()
    level[~np.isfinite(values)] = np.inf
    result = np.where(np.isnan(level), np.inf, level)
    result.flags.writeable = False  # shared between the callers
    return result


def loss_rise(steps: np.ndarray, values: np.ndarray) -> tuple[int, float, bool] | None:
    """(onset index, best level before it, severe) for a rise that lasts to the end of the log:
    severe = above DIVERGENCE_RATIO× the best; else a settled rise above ELEVATED_RATIO×."""
    severe = divergence_onset(steps, values)
    if severe is not None:
        return (*severe, True)
    elevated = divergence_onset(steps, values, ELEVATED_RATIO, ELEVATED_MIN_FRACTION)
    return (*elevated, False) if elevated is not None else None


def starts_nonfinite(values: np.ndarray, onset: int) -> bool:
    """The rise starts at a non-finite point: the loss went from its level to NaN/Inf in one step
    with no climb before it. That is a non-finite value entering the step (the batch, a weight,
    an overflow in one op), not an instability building up: a blind set's loop with NaN
    written into one weight at 297 read "diverged" with "restart with a lower peak LR"
    (session 29)."""
    return not bool(np.isfinite(values[onset]))


def divergence_onset(
    steps: np.ndarray,
    values: np.ndarray,
    ratio: float = DIVERGENCE_RATIO,
    min_fraction: float = DIVERGENCE_MIN_FRACTION,
) -> tuple[int, float] | None:
    """(index where the final sustained excursion began, best level before it), or None.

    The excursion must reach the end of the log in the raw values too (a smoothed tail lags a
    recovery), and last DIVERGENCE_MIN_FRACTION of the logged steps: a log excerpt that ends a few
    steps into a spike shows a spike that has not recovered yet, not a divergence.
    """
    if values.size < 2 * DIVERGENCE_MIN_POINTS:
        return None
    level = smoothed(values)
    best = np.minimum.accumulate(np.where(np.isfinite(level), level, np.inf))
    above = ratio_above(level, best, ratio)
    # The last logged value must be above too: a smoothed tail lags a recovery.
    last = values[-1]
    if not above[-1] or (np.isfinite(last) and not ratio_above(last, best[-1], ratio)):
        return None
    # The excursion that reaches the end of the log: walk back to its first point.
    below = np.flatnonzero(~above)
    onset = int(below[-1]) + 1 if below.size else 0
    if onset > 0:
        # The level must also clear the best by the loss's own noise before the excursion: a loss
        # near zero (a memorized task at 0.01 with noise of 0.03) sits above 1.5× its best at every
        # other point, and the excursion began at noise, 11 steps before an LR jump's blow-up.
        noise = difference_sigma(values[max(0, onset - RISE_NOISE_POINTS) : onset])
        if np.isfinite(noise):
            above &= level > best + DIVERGENCE_NOISE_SIGMAS * noise
            if not above[-1]:
                return None
            below = np.flatnonzero(~above)
            onset = int(below[-1]) + 1 if below.size else 0
    span_steps = int(steps[-1] - steps[onset])
    total_steps = max(int(steps[-1] - steps[0]), 1)
    if onset == 0 or values.size - onset < DIVERGENCE_MIN_POINTS:
        return None
    if span_steps < min_fraction * total_steps:
        return None
    best_before = float(best[onset - 1])
    start = rise_start(values, onset, best_before, ratio)
    return start, float(best[start - 1]) if start > 0 else best_before


# A loss whose term's weight ramps up rises by that term's share: β-annealing a VAE's KL took
# its total from 1.8 to 4.2 (2.3×). A climb far beyond it is the model breaking, weight or not.
MAX_REWEIGHTED_RISE = 4.0


def rise_start(values: np.ndarray, crossing: int, best: float, ratio: float) -> int:
    """The first index of the climb that reaches the ratio at `crossing`: walking back while the
    raw loss stays above `best` by the margin RISE_MARGIN_FRACTION / RISE_NOISE_SIGMAS say (a
    non-finite point is above), never to index 0 (the run's first point has no level before)."""
    window = values[max(0, crossing - RISE_NOISE_POINTS) : crossing]
    trend_level, wander, _ = _settled_trend(window[: -RISE_NOISE_POINTS // 5])
    noise = max(difference_sigma(window), wander)
    noise = noise if np.isfinite(noise) else 0.0
    # From the level the loss held before the climb where that sits above the best so far (the
    # lowest smoothed point of a noisy run lies below the level its loss holds later), unless
    # the loss has been climbing ever since its best point: then the window is the climb's slow
    # start, not a level held before it (a blind set's Lightning run, session 28: an LR growing
    # ×1.008 a step took the loss 2.24 -> 3.3 over 300 steps before it crossed 1.5× at 779;
    # measured from the trend's end, the walk back stopped at 779 itself).
    settled = np.isfinite(trend_level) and not _climbing_since_best(values, crossing, best, ratio)
    level = max(best, trend_level) if settled else best
    threshold = level + max(RISE_MARGIN_FRACTION * (ratio - 1.0) * best, RISE_NOISE_SIGMAS * noise)
    start = crossing
    while start > 1 and not values[start - 1] <= threshold:
        start -= 1
    return start


def _climbing_since_best(values: np.ndarray, crossing: int, best: float, ratio: float) -> bool:
    """Whether the loss had climbed most of the way before `crossing`: its smoothed level just
    before is at least halfway from `best` to `ratio` × best, and from its best smoothed point up
    to the crossing it rises along a straight line by more than RISE_NOISE_SIGMAS of its wander
    around that line. (A loss that drifts up a little and then jumps to NaN has not: measured
    from its best, the walk back went 4-7 steps before the jump on 2 of 250 synthetic NaN logs.)"""
    level = smoothed(values)[:crossing]
    if crossing < 2 or not np.isfinite(level).any():
        return False
    if not level[-1] - best >= SLOW_CLIMB_SHARE * (ratio - 1.0) * best:
        return False
    best_index = int(np.argmin(np.where(np.isfinite(level), level, np.inf)))
    _, wander, rise = _settled_trend(values[best_index:crossing])
    return bool(np.isfinite(rise) and rise > RISE_NOISE_SIGMAS * wander)


def _settled_trend(values: np.ndarray) -> tuple[float, float, float]:
    """(the straight-line trend's value at the window's last point, robust σ of the points around
    it, how much the trend rises across the window): the level the loss held before a climb, and
    how far it wanders (autocorrelated noise, sequential data) where first differences see only
    the step-to-step noise. NaN, NaN, NaN with fewer than 10 finite points."""
    finite = np.flatnonzero(np.isfinite(values))
    if finite.size < 10:
        return float("nan"), float("nan"), float("nan")
    slope, intercept = np.polyfit(finite.astype(float), values[finite], 1)
    residual = values[finite] - (slope * finite + intercept)
    wander = float(MAD_TO_SIGMA * np.median(np.abs(residual - np.median(residual))))
    return float(slope * (values.size - 1) + intercept), wander, float(slope * (values.size - 1))


def _divergence(
    loss: str, steps: np.ndarray, values: np.ndarray, evidence: Evidence
) -> Finding | None:
    found = loss_rise(steps, values)
    if found is None:
        return None
    onset, best, severe = found
    ratio = DIVERGENCE_RATIO if severe else ELEVATED_RATIO
    tail = values[onset:]
    nonfinite = int((~np.isfinite(tail)).sum())
    finite_tail = tail[np.isfinite(tail)]
    final = float(values[-1])
    linked = [
        s
        for s in evidence.spikes
        if s.metric == loss
        and s.onset_step <= int(steps[-1])
        and (s.end_step is None or s.end_step >= int(steps[onset]))
    ]
    verb = "diverged" if severe else "rose and did not come back"
    above = np.flatnonzero(ratio_above(smoothed(values)[onset:], best, ratio))
    crossing = onset + int(above[0]) if above.size else onset
    crossed = (
        f": it began climbing there, went above {ratio}× its best level ({fmt(best)}) at step "
        f"{int(steps[crossing])},"
        if crossing > onset
        else f": it went above {ratio}× its best level ({fmt(best)})"
    )
    message = (
        f"{loss} {verb} from step {int(steps[onset])}{crossed} and stayed there for the "
        f"remaining {values.size - crossing} logged points (last value {fmt(final)}"
        + (f"; {nonfinite} non-finite" if nonfinite else "")
        + ")."
    )
    abrupt = starts_nonfinite(values, onset)
    if abrupt:
        before = values[:onset][np.isfinite(values[:onset])]
        message = (
            f"{loss} became non-finite at step {int(steps[onset])} in one step, from "
            f"{fmt(float(before[-1])) if before.size else 'the start'} (its best level "
            f"{fmt(best)}) with no climb before it, and stayed non-finite or above {ratio}× its "
            f"best for the remaining {values.size - onset} logged points ({nonfinite} "
            "non-finite)."
        )
    min_fraction = DIVERGENCE_MIN_FRACTION if severe else ELEVATED_MIN_FRACTION
    # The eval loss held through the rise: the data changed, not the model (impact.py's rule).
    data_changed = eval_held_text(evidence.run, int(steps[onset]), None) if not nonfinite else ""
    message += data_changed
    # A logged weight of a loss term ramping through the climb, which stays within what a
    # reweighted term gives (MAX_REWEIGHTED_RISE× the best): the objective changed.
    reweighted = (
        not nonfinite and finite_tail.size and finite_tail.max() <= MAX_REWEIGHTED_RISE * best
    )
    ramp = (
        rising_loss_weight(evidence.run, int(steps[onset]), int(steps[-1])) if reweighted else None
    )
    if ramp is not None:
        message += ramp.text()
    return Finding(
        category="loss_divergence",
        severity="info" if data_changed or ramp else "critical" if severe else "warning",
        confidence=(0.9 if tail.size >= 2 * DIVERGENCE_MIN_POINTS else 0.75) if severe else 0.65,
        step=int(steps[onset]),
        layer=None,
        message=message,
        evidence={
            "best_smoothed_loss": best,
            "onset_step": int(steps[onset]),
            "crossing_step": int(steps[crossing]),
            "points_above": int(values.size - crossing),
            "median_after_onset": float(np.median(finite_tail)) if finite_tail.size else None,
            "max_after_onset": float(finite_tail.max()) if finite_tail.size else None,
            "final_value": final,
            "nonfinite_points": nonfinite,
            "abrupt_nonfinite": abrupt,
        },
        suggestion=(
            "Check what the data loader served from the onset on (a new source, shard or mixture "
            "weight); if the change was intended, nothing to do."
            if data_changed
            else f"Look for the non-finite value that entered step {int(steps[onset])}: NaN/Inf "
            "in its batch, in the weights of the last checkpoint before it (tscope lists "
            f"non-finite tensors), or the first module that produced it (`tscope replay --around "
            f"{int(steps[onset])}`); then restart from that checkpoint, past the batch if it "
            "holds the NaN."
            if abrupt
            else "Restart from the last checkpoint before the onset with a lower peak learning "
            "rate, a longer warm-up or tighter clipping; the LR findings and the story show what "
            "moved first."
        ),
        spike_id=linked[0].id if linked else None,
        threshold=(
            f"smoothed loss > {ratio}× its best so far for ≥ {DIVERGENCE_MIN_POINTS} "
            f"points spanning ≥ {min_fraction:.0%} of the logged steps, through the end of the log"
        ),
    )


def _eval_divergence(steps: np.ndarray, values: np.ndarray) -> Finding | None:
    if values.size < EVAL_MIN_RISING_POINTS + 2:
        return None
    nonfinite = ~np.isfinite(values)
    best_index = int(np.argmin(np.where(nonfinite, np.inf, values)))
    best = float(values[best_index])
    tail = values[-EVAL_MIN_RISING_POINTS:]
    rising = bool(np.all(~np.isfinite(tail) | ratio_above(tail, best, EVAL_RISE_RATIO)))
    if best_index >= values.size - EVAL_MIN_RISING_POINTS or not rising:
        return None
    severity = "critical" if nonfinite[-1] else "warning"
    return Finding(
        category="eval_divergence",
        severity=severity,
        confidence=0.7,
        step=int(steps[best_index + 1]),
        layer=None,
        message=(
            f"eval/loss reached its best {fmt(best)} at step {int(steps[best_index])} and the last "
            f"{EVAL_MIN_RISING_POINTS} evaluations are above {EVAL_RISE_RATIO}× that (last "
            f"{fmt(float(values[-1]))})."
        ),
        evidence={
            "best_eval_loss": best,
            "best_step": int(steps[best_index]),
            "last_eval_loss": float(values[-1]),
            "evaluations": int(values.size),
        },
        suggestion=(
            "If the training loss kept falling, this is overfitting (more data or regularization, "
            "or keep the best checkpoint); if it rose too, see loss_divergence."
        ),
        threshold=f"last {EVAL_MIN_RISING_POINTS} evals > {EVAL_RISE_RATIO}× the best eval loss",
    )
