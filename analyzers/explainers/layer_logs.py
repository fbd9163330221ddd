"""layer_origin from per-layer logs: which layer's statistic moved first, and how long before the loss.

The per-layer series are the ones a recorder wrote (trainscope's `layers/<param>.arrow`, read as
`layers/<layer>/<stat>`) or the ones a run logged itself under a common scheme
(`grad_norm/<layer>`, `weights/<layer>/norm`, `activations/<layer>/max`, …; see
tscope.model.layer_metrics). The rule, per series:

- a norm or max (gradient, weight, activation) *deviates* at the first point (after the first
  10% of the series and twice the warm-up) that is ≥ 2× the median of the DEVIATION_WINDOW
  points before it and ≥ 6 robust σ of its own step-to-step noise, and stays so (against that
  same median) for the next PERSIST_POINTS points; a non-finite value deviates;
- an activation kurtosis deviates when it rises ≥ KURTOSIS_RISE above that median and to at least
  twice it.

Only a layer that deviated at or before the loss incident (the first loss spike's onset, or the
first non-finite loss) and stayed deviated for most of the way to it counts: a blip that
came back is not an origin. The earliest such layer is named, with its lead in steps. A run
without a loss incident gets nothing from here: per-layer noise alone is never reported.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.baseline import MAD_TO_SIGMA, rolling_median, shifted_by_one
from tscope.analyzers.early_phase import warmup_end
from tscope.analyzers.signals import fmt, primary_loss
from tscope.model import Finding, Run
from tscope.model.layer_metrics import ACT_KURTOSIS, STAT_WORDS, layer_metric
from tscope.model.metric_names import LEARNING_RATE

# 2×: the factor the checkpoint-side layer_origin uses (analyzers/explainers/updates.py).
# Measured on the healthy recordings (fixtures/data/trainscope/healthy, 19 tensors × 5 stats, and
# fixtures/data/layer_tb/healthy): no series deviated and persisted (scripts/measure_rules.py
# --layers prints the count); on the planted runs the planted layer is the first to deviate.
DEVIATION_FACTOR = 2.0
DEVIATION_WINDOW = 20  # points before the candidate: its reference median
# Early training is skipped: a zero-initialized bias or a norm's weight grows by factors in its
# first steps (measured: ×4.4 within 8 steps in the healthy recording). Judged from 10% of the
# series on, and never before a full reference window.
EARLY_SKIP_FRACTION = 0.10
# ... nor before twice the LR warm-up (when one is logged): a warm-up's end moves every layer.
WARMUP_SKIP_FACTOR = 2.0
# A deviation is also beyond the series' own noise: ≥ 6 robust σ of its log step-to-step changes
# (the robust_z detector's 6σ, analyzers/detectors/robust_z.py).
NOISE_SIGMAS = 6.0
# Stays deviated for the next 2 points too: one noisy batch that doubles a small layer's gradient
# norm is not a deviation (measured: single-point ×2 excursions of per-layer gradient norms occur
# in the healthy recording; three in a row do not).
PERSIST_POINTS = 2
# Between its onset and the loss incident, at least this share of the layer's points deviate.
HELD_FRACTION = 0.6
KURTOSIS_RISE = 3.0  # excess kurtosis: 0 for a Gaussian; +3 is a clearly heavy tail
MAX_LISTED = 5  # other layers named in the evidence, in the order they moved


class Deviation(NamedTuple):
    layer: str
    stat: str
    step: int
    reference: float
    value: float
    score: float  # |log ratio| (norms) or rise (kurtosis); ordering ties


class LayerLogsExplainer:
    name = "layer_logs"
    categories: tuple[str, ...] = ("layer_origin",)
    defines = ()  # its categories are declared by the explainers that mainly produce them

    def run(self, evidence: Evidence) -> list[Finding]:
        run = evidence.run
        series = layer_series(run)
        if len({layer for layer, _ in series}) < 2:
            return []
        incident = loss_incident_step(evidence)
        if incident is None:
            return []
        skip_until = early_steps(run)
        moved = sorted(
            (
                d
                for (layer, stat), (steps, values) in series.items()
                if (d := held_deviation(layer, stat, steps, values, incident, skip_until))
                is not None
            ),
            key=lambda d: (d.step, -d.score),
        )
        if not moved:
            return []
        return [_finding(moved, incident, run)]


def layer_series(run: Run) -> dict[tuple[str, str], tuple[np.ndarray, np.ndarray]]:
    found = {}
    for name in run.metric_names:
        recognized = layer_metric(name)
        if recognized is not None:
            found[(recognized.layer, recognized.stat)] = run.series(name)
    return found


def early_steps(run: Run) -> int:
    """The step before which no layer is judged: twice the end of the LR warm-up, if logged."""
    if not run.has(LEARNING_RATE):
        return 0
    steps, lrs = run.series(LEARNING_RATE)
    end = warmup_end(steps, lrs)
    return int(WARMUP_SKIP_FACTOR * steps[end]) if end is not None else 0


def loss_incident_step(evidence: Evidence) -> int | None:
    loss = primary_loss(evidence.run)
    if loss is None:
        return None
    steps = [s.onset_step for s in evidence.spikes_on(loss)]
    loss_steps, values = evidence.run.series(loss)
    nonfinite = loss_steps[~np.isfinite(values)]
    if nonfinite.size:
        steps.append(int(nonfinite[0]))
    return min(steps) if steps else None


def deviates(stat: str, reference: float, value: float) -> bool:
    if not np.isfinite(value):
        return True
    if stat == ACT_KURTOSIS:
        return value - reference >= KURTOSIS_RISE and value >= 2 * max(reference, 0.0)
    if reference <= 0:
        return False
    # Upward only: a gradient that vanishes (an expert no token reached, a frozen layer) is a
    # different story (loss_plateau, frozen_parameters), not the origin of a blow-up.
    return bool(value / reference >= DEVIATION_FACTOR)


def beyond_noise(stat: str, before: np.ndarray, reference: float, value: float) -> bool:
    """The jump from the reference exceeds NOISE_SIGMAS × the series' own step-to-step noise
    (robust, in log units for norms): a rarely routed expert's gradient doubles from batch to
    batch and is not a deviation; a weight norm that moved 0.3% a step and now doubles is."""
    if not np.isfinite(value) or stat == ACT_KURTOSIS:
        return True
    positive = before[before > 0]
    if positive.size < 3 or value <= 0:
        return False
    changes = np.diff(np.log(positive))
    sigma = MAD_TO_SIGMA * float(np.median(np.abs(changes - np.median(changes)))) / np.sqrt(2.0)
    return bool(np.log(value / reference) >= NOISE_SIGMAS * max(sigma, 1e-12))


def first_deviation(
    stat: str, steps: np.ndarray, values: np.ndarray, skip_until: int
) -> tuple[int, float] | None:
    """(index, reference median) of the first deviation that persists, or None."""
    start = max(DEVIATION_WINDOW, int(EARLY_SKIP_FRACTION * values.size))
    start = max(start, int(np.searchsorted(steps, skip_until, side="left")))
    for i in _candidates(stat, values, start):
        before = values[i - DEVIATION_WINDOW : i]
        before = before[np.isfinite(before)]
        if before.size < DEVIATION_WINDOW // 2:
            continue
        reference = float(np.median(before))
        if not beyond_noise(stat, before, reference, float(values[i])):
            continue
        if all(
            deviates(stat, reference, float(values[j])) for j in range(i, i + PERSIST_POINTS + 1)
        ):
            return i, reference
    return None


def deviates_each(stat: str, references: np.ndarray, values: np.ndarray) -> np.ndarray:
    """`deviates` element-wise, each value against its own reference."""
    with np.errstate(invalid="ignore", divide="ignore"):
        if stat == ACT_KURTOSIS:
            hit = (values - references >= KURTOSIS_RISE) & (values >= 2 * np.maximum(references, 0))
        else:
            hit = (references > 0) & (values / references >= DEVIATION_FACTOR)
    result: np.ndarray = hit | ~np.isfinite(values)
    return result


def _candidates(stat: str, values: np.ndarray, start: int) -> np.ndarray:
    """Indices ≥ start that deviate from their trailing median and stay so (against it) for the
    next PERSIST_POINTS points: a vectorized pre-filter (one rolling median per series), so the
    exact checks above run on a few points only."""
    clean = np.where(np.isfinite(values), values, np.nan)
    reference = shifted_by_one(rolling_median(clean, DEVIATION_WINDOW, DEVIATION_WINDOW // 2))
    last = values.size - PERSIST_POINTS
    if last <= start:
        return np.empty(0, dtype=np.int64)
    hit = np.ones(last - start, dtype=bool)
    for k in range(PERSIST_POINTS + 1):
        hit &= deviates_each(stat, reference[start:last], values[start + k : last + k])
    found: np.ndarray = np.flatnonzero(hit) + start
    return found


def held_deviation(
    layer: str, stat: str, steps: np.ndarray, values: np.ndarray, incident: int, skip_until: int
) -> Deviation | None:
    upto = steps <= incident + PERSIST_POINTS
    found = first_deviation(stat, steps[upto], values[upto], skip_until)
    if found is None:
        return None
    i, reference = found
    if steps[i] > incident:
        return None
    between = values[i : int(np.searchsorted(steps, incident, side="right"))]
    held = (
        float(np.mean(deviates_each(stat, np.full(between.size, reference), between)))
        if between.size
        else 1.0
    )
    if held < HELD_FRACTION:
        return None
    value = float(values[i])
    if stat == ACT_KURTOSIS:
        score = value - reference
    elif np.isfinite(value) and value > 0:
        score = abs(float(np.log(value / reference)))
    else:
        score = float("inf")
    return Deviation(layer, stat, int(steps[i]), reference, value, score)


def _finding(moved: list[Deviation], incident: int, run: Run) -> Finding:
    first = moved[0]
    lead = incident - first.step
    tied = [d for d in moved[1:] if d.step == first.step and d.layer != first.layer]
    change = (
        f"from {fmt(first.reference)} to {fmt(first.value)}"
        if first.stat == ACT_KURTOSIS
        else f"{fmt(first.value / first.reference) if first.reference else 'n/a'}× its level "
        f"({fmt(first.reference)} → {fmt(first.value)})"
    )
    when = f"{lead} steps before" if lead > 0 else "at the same step as"
    others = [
        {"layer": d.layer, "stat": d.stat, "step": d.step}
        for d in moved[1:]
        if (d.layer, d.stat) != (first.layer, first.stat)
    ][:MAX_LISTED]
    recorder = sorted(e.step for e in run.events_of("recorder_spike"))
    evidence: dict[str, object] = {
        "stat": first.stat,
        "deviation_step": first.step,
        "reference": first.reference,
        "value": first.value,
        "loss_incident_step": incident,
        "lead_steps": lead,
        "layers_with_series": len({layer for layer, _ in layer_series(run)}),
        "layers_deviated": len({d.layer for d in moved}),
        "moved_next": others,
    }
    if recorder:
        evidence["recorder_flagged_steps"] = recorder[:20]
        evidence["recorder_first_flag"] = recorder[0]
    return Finding(
        category="layer_origin",
        severity="warning",
        confidence=0.5 if tied else 0.65,
        step=first.step,
        layer=first.layer,
        message=(
            f"{first.layer}'s {STAT_WORDS[first.stat]} moved first: {change} at step "
            f"{first.step}, {when} the loss incident at step {incident}"
            + (f" (together with {len(tied)} other layer(s))" if tied else "")
            + "."
        ),
        evidence=evidence,
        suggestion=(
            f"Look at what is particular to {first.layer}: its parameter group's learning rate "
            "and weight decay, its initialization, a norm it lacks. Restart from a checkpoint "
            f"before step {first.step}, not just before the loss moved."
        ),
        threshold=(
            f"first per-layer series ≥ {DEVIATION_FACTOR:g}× its "
            f"median of the previous {DEVIATION_WINDOW} points for {PERSIST_POINTS + 1} points in "
            f"a row, held for ≥ {HELD_FRACTION:.0%} of the way to the loss incident; kurtosis: "
            f"+{KURTOSIS_RISE:g} and ≥ 2×"
        ),
    )
