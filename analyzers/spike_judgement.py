"""When a spike matters: its length, whether it is worth a warning (`is_notable`), a run's routine
bumps (`is_texture`), what an optimizer change could have caused (`optimizer_ruled_out`) and
whether the loss reacts to a gradient excursion. Asked by the spike explainer (spikes.py), the
cause explainers and the incident builder, with one per-analysis index so each is linear in the
number of spikes."""

from __future__ import annotations

import bisect
from dataclasses import dataclass, field

import numpy as np

from tscope.analyzers.baseline import BASELINE_WINDOW_POINTS
from tscope.analyzers.impact import (
    MIN_WARNING_EXCESS,
    TRANSIENT_MAX_POINTS,
    TRANSIENT_MAX_RATIO,
    impact_severity,
    measure_impact,
    small_against_gain,
)
from tscope.analyzers.loss_weights import loss_weight_names, rising_loss_weight
from tscope.analyzers.reach import CAUSE_LOOKBACK_STEPS, LR_EFFECT_WINDOW_POINTS
from tscope.analyzers.signals import primary_loss
from tscope.model import Run, Spike
from tscope.model.metric_names import EVAL_LOSS, LEARNING_RATE, is_loss_like

# When a spike is worth a warning: the severity rule's constants live in analyzers/impact.py
# (TRANSIENT_MAX_POINTS, TRANSIENT_MAX_RATIO, MIN_WARNING_EXCESS), the one rule for every incident.
# Some runs bump all the time (tiny batches, repeated data): when transient spikes occur more than
# once per 1,000 logged points they are the run's texture, and only one that stands out from them
# (magnitude ≥ TEXTURE_OUTLIER_FACTOR × their median) deserves attention. Measured on
# shared/realdata: the baize LoRA run (batch 2) has 5 per 1,000 and modded-nanogpt 5 per 1,000;
# pythia has 0.01 per 1,000.
TEXTURE_SPIKES_PER_1000 = 1.0
# The outlier factor, measured (2026-12-01) on the 72 healthy real logs that are texture runs
# (71 modded-nanogpt + baize): their largest spike is 1.53–3.26× the median magnitude (3.26: a
# QuantizedFP4 run's one-step 3.17 → 6.28 among its 83 bumps; next 2.97), so 3.0 gave 1 false
# warning in 72 (above the ≤ 1 per 100 target) and 3.5 gives 0. Planted into 24 of those runs (one
# point ×2 / ×1.5 at a random step): a doubling stands out at 2.95–7.55× — recall 23/24 at 3.0,
# 22/24 at 3.5; a ×1.5 bump 8/24 at 3.0, 3/24 at 3.5 (those stay in the recurring finding).
TEXTURE_OUTLIER_FACTOR = 3.5


def spike_points(run: Run, spike: Spike) -> int:
    """How many logged points the excursion lasted (onset to recovery, or to the end)."""
    steps, _ = run.series(spike.metric)
    last = spike.end_step if spike.end_step is not None else int(steps[-1])
    # Steps are sorted and unique (Run.series): the count of onset <= step < end is a difference
    # of two binary searches, not two comparisons over the whole series per spike.
    first, end = np.searchsorted(steps, [spike.onset_step, max(last, spike.onset_step + 1)])
    return int(end - first)


def is_transient(run: Run, spike: Spike) -> bool:
    if spike.nonfinite or spike.end_step is None:
        return False
    return spike_points(run, spike) <= TRANSIENT_MAX_POINTS


@dataclass
class _SpikeIndex:
    """What the rules below ask of a run's spike list again and again, computed once per list:
    per-series spikes, their median size, each spike's notability, and the loss spikes by onset.
    Asked per spike over the whole list, these made a 100,000-point log with a spike every 50
    steps take 11 s and a 500,000-point one over a minute (red-team round 3)."""

    run: Run
    spikes: list[Spike]
    size: int
    by_metric: dict[str, list[Spike]]
    typical: dict[str, float] = field(default_factory=dict)
    notable: dict[int, bool] = field(default_factory=dict)
    loss_onsets: list[int] = field(default_factory=list)
    loss_by_onset: list[Spike] = field(default_factory=list)


# One entry: the list the rules are reading now. It holds the run and the list, so an identity
# match cannot be a recycled id; the size check catches a list grown in place.
_INDEX: list[_SpikeIndex] = []


def _index(run: Run, spikes: list[Spike]) -> _SpikeIndex:
    cached = _INDEX[0] if _INDEX else None
    if cached and cached.run is run and cached.spikes is spikes and cached.size == len(spikes):
        return cached
    by_metric: dict[str, list[Spike]] = {}
    for spike in spikes:
        by_metric.setdefault(spike.metric, []).append(spike)
    index = _SpikeIndex(run, spikes, len(spikes), by_metric)
    loss = primary_loss(run)
    index.loss_by_onset = sorted(
        by_metric.get(loss, []) if loss else [], key=lambda s: s.onset_step
    )
    index.loss_onsets = [s.onset_step for s in index.loss_by_onset]
    _INDEX[:] = [index]
    return index


def is_notable(run: Run, spike: Spike, spikes: list[Spike]) -> bool:
    """Worth a warning: not a small bump, and not one of this run's routine bumps."""
    index = _index(run, spikes)
    known = index.notable.get(id(spike))
    if known is None:
        known = _is_notable(run, spike, spikes, index)
        index.notable[id(spike)] = known
    return known


def _data_changed(run: Run, spike: Spike) -> bool:
    """A loss-like spike that lasted while the eval loss held (impact.py's rule). Without an
    eval loss there is nothing to measure: no impact is computed for every spike then."""
    return (
        run.has(EVAL_LOSS)
        and is_loss_like(spike.metric)
        and (measure_impact(run, spike.onset_step, spike.end_step, spike.metric).data_changed)
    )


def _reweighted(run: Run, spike: Spike) -> bool:
    """A logged loss weight ramped up from the spike's baseline window to its end: the level it
    is measured against belongs to an objective that has since changed (loss_weights.py)."""
    if not loss_weight_names(tuple(run.metric_names)):
        return False  # most runs: no weight logged, no series read per spike
    steps, _ = run.series(spike.metric)
    onset = int(np.searchsorted(steps, spike.onset_step))
    start = int(steps[max(onset - BASELINE_WINDOW_POINTS, 0)]) if steps.size else spike.onset_step
    end = spike.end_step if spike.end_step is not None else (int(steps[-1]) if steps.size else 0)
    return rising_loss_weight(run, start, end) is not None


def _is_notable(run: Run, spike: Spike, spikes: list[Spike], index: _SpikeIndex) -> bool:
    if spike.nonfinite:
        return True
    ratio = spike.peak_value / spike.baseline if spike.baseline > 0 else float("inf")
    # Below MIN_WARNING_EXCESS even when the log ends before it recovers: a +4% rise in the last
    # points of an EMA-smoothed loss (many σ of the smoothed noise) was a warning on 2 of 300
    # healthy synthetic logs (bench/synthetic_logs.py); a rise that lasts is loss_divergence's.
    if ratio < 1 + MIN_WARNING_EXCESS:
        return False
    # A lasting rise the eval loss did not share is the data changing, not a spike to warn of.
    if _data_changed(run, spike):
        return False
    if is_loss_like(spike.metric) and _reweighted(run, spike):
        return False
    if spike.end_step is None:
        return True
    if is_texture(run, spike.metric, spikes):
        typical = index.typical.get(spike.metric)
        if typical is None:
            same_series = index.by_metric.get(spike.metric, [])
            typical = float(np.median([s.magnitude for s in same_series]))
            index.typical[spike.metric] = typical
        return spike.magnitude >= TEXTURE_OUTLIER_FACTOR * typical
    # The one severity rule (analyzers/impact.py): a recovered bump whose excess amounts to a few
    # points at its peak, below the short-bump bound (higher in the early phase), is the data's
    # texture or the warm-up's aftermath, not an incident.
    impact = (
        measure_impact(run, spike.onset_step, spike.end_step, spike.metric)
        if is_loss_like(spike.metric)
        else None
    )
    bound = impact.short_bump_bound if impact is not None else TRANSIENT_MAX_RATIO
    if impact is not None and small_against_gain(impact):
        return False  # near a loss floor a ratio says nothing (impact.MIN_EXCESS_OF_GAIN)
    if is_transient(run, spike):
        return ratio >= bound
    if impact is None:
        return True
    if ratio < bound and impact.short_bump:
        return False
    if ratio < TRANSIENT_MAX_RATIO:
        # A longer recovered bump below TRANSIENT_MAX_RATIO is the data's too when nothing in the
        # run's optimization can have made it (`optimizer_ruled_out`).
        return impact.returned_to_initial or not optimizer_ruled_out(run, spike)
    return True


# The window before a loss bump's onset in which an LR rise or a resume is a cause in reach: the
# LR explainers' window (in logged points) and the ranking's (in steps), analyzers/reach.py.
# "Steady": the LR never rises above its value at the window's start by more than this fraction
# (a decaying schedule is steady; a warm-up step or an LR jump moves it by far more — jumps are
# ≥ 25%, learning_rate.LR_JUMP_MIN_RELATIVE).
STEADY_LR_TOLERANCE = 0.02
# Measured (2026-12-02, every recovered loss bump of 1.1–1.5× on the 358 cached benchmark runs
# of dev, test, holdout and holdout2, 82 of them controls): above SHORT_BUMP_POINTS, the two
# healthy Trainer GPT-2 controls with sequential data (test 07, 09: a text change at 113,
# 1.23–1.24× for 10–12 points, 5.2–6.3 effective points) had the LR steady and no resume: ruled
# out, 0 of 82 controls warned after (2 before). The gradient norm does not separate a data bump
# from an incident: healthy bumps 1.8–60× (those two: 2.1×), planted ones 1.3–11.5× (the LR ramp:
# 1.3×). Every planted bump above SHORT_BUMP_POINTS (18: weights re-initialized at a resume 10,
# LR jumps 5, repeated data 2, an LR ramp 1) carries its own measured cause finding at warning
# or critical, so the run stays an incident with the same headline. Scored before and after
# (dev, holdout, holdout2, test): planted headlines 259/276 both; no headline moved; controls with
# a warning 2/82 → 0/82; the one other change is 2 symptom warnings of a planted repeated-data run
# (holdout2 nanogpt-55, headline kept) now info. Healthy real logs: 0/76 with a warning after; 3
# extra sequential-data controls trained with other indices: 0 warnings.


def optimizer_ruled_out(run: Run, spike: Spike) -> bool:
    """The logged LR held steady (no rise beyond STEADY_LR_TOLERANCE) from
    LR_EFFECT_WINDOW_POINTS before the bump to its end, and no resume lies in reach: no LR change
    or resume can have caused it, and a modest bump that recovers is most likely what the batches
    did (an in-order corpus changing text). Without the LR logged nothing is ruled out."""
    steps, lrs = run.series(LEARNING_RATE)
    if steps.size == 0 or spike.end_step is None:
        return False
    start = max(int(np.searchsorted(steps, spike.onset_step, "left")) - LR_EFFECT_WINDOW_POINTS, 0)
    stop = int(np.searchsorted(steps, spike.end_step, "right"))
    window = lrs[start:stop]
    if window.size < 2 or not np.isfinite(window).all() or window[0] <= 0:
        return False
    if float(window.max()) > window[0] * (1 + STEADY_LR_TOLERANCE):
        return False
    return not any(
        spike.onset_step - CAUSE_LOOKBACK_STEPS <= event.step <= spike.end_step
        for event in run.events_of("resume")
    )


def is_texture(run: Run, metric: str, spikes: list[Spike]) -> bool:
    """The series bumps all the time: ≥ 3 spikes, more than TEXTURE_SPIKES_PER_1000 points."""
    count = len(_index(run, spikes).by_metric.get(metric, []))
    points = run.series(metric)[0].size
    return count >= 3 and count * 1000 / max(points, 1) > TEXTURE_SPIKES_PER_1000


# A gradient-norm jump "makes the loss react" when a loss spike starts within this many points.
LOSS_REACTION_POINTS = 20
# A gradient-only excursion's effect on the loss is measured up to this many logged loss points
# after its peak (the loss reacts within a few optimizer steps).
REACTION_POINTS = 3


def _points_between(run: Run, metric: str, first: int, second: int) -> int:
    steps, _ = run.series(metric)
    low, high = sorted((first, second))
    # Steps are sorted: two binary searches, not a mask over the whole series per spike.
    return int(np.searchsorted(steps, high, "right") - np.searchsorted(steps, low, "right"))


def loss_reacts(run: Run, spike: Spike, spikes: list[Spike]) -> bool:
    """The loss shows this gradient excursion as an incident: a loss spike worth a warning starts
    with it or within LOSS_REACTION_POINTS after, or the loss's own impact from the excursion's
    onset to REACTION_POINTS points after its peak grades above info by the one severity rule
    (analyzers/impact.py).

    A small bump of the same step's loss is not a reaction: both numbers come from one batch (the
    Trainer logs the loss and the gradient norm of the batch before its update), so together
    they say the batch was unusual, not that training was hurt. A healthy benchmark control's
    natural batch at step 60 gave a gradient norm of 24 (30× typical, clipped to 1) and a +19%
    loss bump, back the next step; BLOOM-176B's 960 at step 31219 came with the loss at 2.3×."""
    index = _index(run, spikes)
    # The loss spikes by onset, from one step before this one's on, until one starts more than
    # LOSS_REACTION_POINTS loss points after it (onsets sorted: every later one does too).
    first = bisect.bisect_left(index.loss_onsets, spike.onset_step - 1)
    for other in index.loss_by_onset[first:]:
        if (
            _points_between(run, other.metric, spike.onset_step, other.onset_step)
            > LOSS_REACTION_POINTS
        ):
            break
        if _data_changed(run, other):
            return False  # the loss rose with it, but as the data changed (eval loss held)
        if is_notable(run, other, spikes):
            return True
    impact = measure_impact(run, spike.onset_step, reaction_end(run, spike))
    if impact_severity(impact) == "info":
        return False
    # The loss bump's own rule (`_is_notable`): a recovered excursion below TRANSIENT_MAX_RATIO
    # while the LR held steady and no resume lay in reach is what the batches did. Without it a
    # healthy sequential-data control (holdout8 trainer_gpt2-control-89: the loss drifting 1.10×
    # over 30 steps at a constant LR while the gradient norm wandered to 4.7×) was a warning that
    # the same bump measured as a loss spike would not have been.
    return (
        impact.ratio >= TRANSIENT_MAX_RATIO
        or impact.returned_to_initial
        or not optimizer_ruled_out(run, spike)
    )


def reaction_end(run: Run, spike: Spike) -> int:
    """The step REACTION_POINTS loss points after a gradient spike's peak (or its recovery,
    when earlier): where its effect on the loss is measured."""
    loss = primary_loss(run)
    if loss is None:
        return spike.peak_step + 1
    steps, _ = run.series(loss)
    later = steps[steps > spike.peak_step]
    limit = int(later[min(REACTION_POINTS, later.size) - 1]) + 1 if later.size else 0
    limit = max(limit, spike.peak_step + 1)
    return min(limit, spike.end_step) if spike.end_step is not None else limit
