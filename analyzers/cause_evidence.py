"""The evidence the cause competition reads from the logs (analyzers/causes.py): the loss's
shape at an incident, the LR through it, and the words for both."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.early_phase import (
    EARLY_FRACTION,
    EARLY_WARMUP_FACTOR,
    early_phase_end_step,
    early_phase_points,
    is_early_step,
)
from tscope.analyzers.explainers.learning_rate import lr_jumps
from tscope.analyzers.incidents import Incident
from tscope.analyzers.signals import fmt, loss_series, primary_loss, window
from tscope.model import Finding
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE

# Over the incident's lookback, an LR that moved less than this is "did not change".
LR_STEADY_RELATIVE = 0.05
# An LR that rose this much through the window is said to have climbed, not to follow a schedule.
LR_CLIMB_NOTED = 1.5
# How far before the onset the LR is checked for a jump or a change.
LR_CHECK_STEPS = 50
# A bad batch breaks the loss within this many logged points from the onset to the peak.
BAD_BATCH_MAX_RISE_POINTS = 2


def rise_points(evidence: Evidence, incident: Incident) -> int:
    """Logged loss points from the onset to the peak (1: the loss broke in one step)."""
    steps, _ = evidence.run.series(incident.metric)
    return int(((steps > incident.onset_step) & (steps <= incident.peak_step)).sum()) + 1


def no_lr_reasons(incident: Incident, rise: int) -> str:
    shape = (
        "a one-step break, which a bad batch and a transient LR jump both give"
        if rise <= BAD_BATCH_MAX_RISE_POINTS
        else f"a rise over {rise} logged points, an optimization instability"
    )
    return (
        f"{shape}; the learning rate was not logged, so a schedule jump, ramp or warm-up end "
        f"cannot be ruled in or out — log the LR, or run `tscope replay --around "
        f"{incident.peak_step}` to see whether the batch alone breaks the loss"
    )


def slow_rise_reasons(evidence: Evidence, incident: Incident, rise: int) -> str:
    """Why a slow rise is not a bad batch, and what would tell the causes apart."""
    span = incident.peak_step - incident.onset_step
    text = (
        f"the loss rose over {rise} logged points ({span} steps) before peaking, which one bad "
        "batch does not do (it breaks the loss in one step): an optimization instability"
    )
    lr_note = lr_change_note(evidence, incident)
    if lr_note is not None:
        text += f"; {lr_note}, so the schedule did not drive it"
    return text + f"; a replay of the steps around {incident.peak_step} would decide"


def in_early_phase(evidence: Evidence, incident: Incident) -> bool:
    """The incident peaks in the early phase of the logged loss points, where healthy runs break
    for one step at the peak LR (early_phase.early_phase_points)."""
    steps, _ = evidence.run.series(incident.metric)
    return is_early_step(evidence.run, steps, incident.peak_step)


def early_phase_reasons(evidence: Evidence, incident: Incident) -> str:
    """Why a one-step break early in the run is not named a bad batch, and what would decide."""
    steps, _ = evidence.run.series(incident.metric)
    end = early_phase_end_step(evidence.run)
    if end is not None and early_phase_points(evidence.run, steps) < int(
        EARLY_FRACTION * steps.size
    ):
        phase = f"within {EARLY_WARMUP_FACTOR:g} warm-up lengths after the warm-up (to step {end})"
    else:
        phase = (
            f"in the first {EARLY_FRACTION:.0%} of the logged run "
            f"(steps {int(steps[0])}–{int(steps[-1])})"
        )
    return (
        f"the loss broke at step {incident.peak_step}, {phase}, where healthy runs break for one "
        "step at the peak learning rate with the gradient norm many times its neighbours: an "
        "optimization instability the logs cannot tell from a bad batch; a replay of the steps "
        f"around {incident.peak_step} (`tscope replay --around {incident.peak_step}`) would decide"
    )


def bad_batch_reasons(evidence: Evidence, incident: Incident) -> str:
    reasons = []
    lr_note = lr_change_note(evidence, incident)
    if lr_note is not None:
        reasons.append(lr_note)
    if evidence.run.has(GRAD_NORM):
        _, grads = window(evidence.run, GRAD_NORM, incident.onset_step, incident.peak_step)
        grads = grads[np.isfinite(grads)]
        if grads.size:
            reasons.append(f"the gradient norm reached {fmt(float(np.nanmax(grads)))} at the spike")
    if incident.end_step is not None:
        reasons.append(f"the loss was back to baseline by step {incident.end_step}")
    reasons.append("no resume, schedule jump or drift preceded it")
    return ", ".join(reasons) + "."


def lr_change_note(evidence: Evidence, incident: Incident) -> str | None:
    """'steady' or 'smooth' description of the LR through the incident; None if it jumped."""
    if not evidence.run.has(LEARNING_RATE):
        return None
    steps, lrs = window(
        evidence.run, LEARNING_RATE, incident.onset_step - LR_CHECK_STEPS, incident.peak_step
    )
    if lrs.size == 0 or not np.isfinite(lrs).all() or lrs.max() <= 0:
        return None
    if lr_jumps(steps, lrs):
        return None
    change = float((lrs.max() - lrs.min()) / lrs.max())
    if change < LR_STEADY_RELATIVE:
        return f"the learning rate was steady at {fmt(float(lrs[-1]))}"
    first, last = float(lrs[0]), float(lrs[-1])
    if first > 0 and last >= LR_CLIMB_NOTED * first:
        # Smooth, but not necessarily the schedule's: a ramp compounding ×1.08 per step is smooth
        # too (bench holdout5 lightning-lr_ramp-70 read "followed its schedule" at ×42).
        return f"the learning rate climbed ×{fmt(last / first)} without a jump ({fmt(first)} → {fmt(last)})"
    return f"the learning rate followed its schedule smoothly ({fmt(first)} → {fmt(last)}, no jump)"


def undecided_reason(evidence: Evidence, incident: Incident | None, category: str) -> str:
    """Why the inferred candidate `category` cannot be named; "" when the evidence allows it."""
    if category != "bad_batch" or incident is None:
        return ""
    rise = rise_points(evidence, incident)
    if not evidence.run.has(LEARNING_RATE):
        # A transient LR jump breaks the loss in one step too: without the LR the logs cannot
        # tell it from a bad batch.
        return no_lr_reasons(incident, rise)
    if rise > BAD_BATCH_MAX_RISE_POINTS:
        return slow_rise_reasons(evidence, incident, rise)
    if in_early_phase(evidence, incident):
        # The bad-batch rule does not speak for the early phase (early_phase.EARLY_FRACTION:
        # healthy runs break like a bad batch right after the warm-up), and neither does naming
        # it by elimination: holdout7's trainer_llama-control-82, a natural break at step 42 of
        # 170 (gradient norm 36×), was "most likely a bad batch (confidence 0.96)".
        return early_phase_reasons(evidence, incident)
    return ""


def no_candidate_reason(evidence: Evidence, incident: Incident | None) -> str:
    """Why no cause is named for an incident no candidate reaches, and what would decide. A
    divergence or a loss gone non-finite is no cause of itself: naming it as the verdict's cause
    (as before) told the reader "the loss diverging, confidence 0.99"."""
    if incident is None:
        return ""
    if incident.kind == "spike" and incident.end_step is not None:
        if not evidence.run.has(LEARNING_RATE):
            return no_lr_reasons(incident, rise_points(evidence, incident))
        return (
            "no logged cause acts where the incident starts; a replay of the steps around "
            f"{incident.peak_step} (`tscope replay --around {incident.peak_step}`) would decide"
        )
    onset = incident.onset_step
    if incident.abrupt_nonfinite:
        return (
            "a jump from the loss's level to NaN/Inf in one step points at a non-finite value "
            "entering that step (its batch, a weight, an overflow in one op) rather than an "
            "instability building up; "
            + (
                "the checkpoints read show no non-finite weights before it"
                if evidence.checkpoints is not None
                else f"checkpoints from before step {onset} would show non-finite weights"
            )
            + f", and `tscope replay --around {onset}` the first module that produced it"
        )
    logged = (
        "no logged cause acts where it starts (no LR jump, climb or warm-up end, no resume)"
        if evidence.run.has(LEARNING_RATE)
        else "the learning rate was not logged, so a schedule jump, ramp or warm-up end cannot "
        "be ruled in or out (log the LR)"
    )
    checkpoints = (
        "the checkpoints read show no cause either"
        if evidence.checkpoints is not None
        else f"checkpoints from before step {onset} would show which layers moved first"
    )
    return (
        f"{logged}; {checkpoints}, and `tscope replay --around {onset}` whether the data alone "
        "breaks the loss"
    )


def weights_followed_the_loss(evidence: Evidence, finding: Finding) -> bool:
    """A nonfinite_weights finding whose checkpoint the logged loss had gone NaN/Inf before: the
    loss went non-finite after the last finite checkpoint (or, with none, before this one) and
    stayed so up to this one. The weights went non-finite through those updates; they did not
    cause them (hQ run15, session 31: an activation overflow at 151 read "most likely NaN/Inf
    in the saved weights", the checkpoint at 260 that the NaN updates had written). A transient
    NaN loss that came back finite before the checkpoint leaves the weights a candidate."""
    loss = primary_loss(evidence.run)
    if loss is None or finding.step is None:
        return False
    steps, values = loss_series(evidence.run, loss)
    last_finite = finding.evidence.get("last_finite_checkpoint_step")
    start = last_finite if isinstance(last_finite, int) else None
    inside = (steps <= finding.step) & (steps > start if start is not None else True)
    window_values = values[inside]
    if window_values.size == 0 or np.isfinite(window_values[-1]):
        return False
    return bool((~np.isfinite(window_values)).any())
