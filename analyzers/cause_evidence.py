"""The evidence the cause competition reads from the logs (analyzers/causes.py): the loss's
shape at an incident, the LR through it, and the words for both."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.learning_rate import lr_jumps
from tscope.analyzers.incidents import Incident
from tscope.analyzers.signals import fmt, window
from tscope.model import Finding
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE

# Over the incident's lookback, an LR that moved less than this is "did not change".
LR_STEADY_RELATIVE = 0.05
# How far before the onset the LR is checked for a jump or a change.
LR_CHECK_STEPS = 50
# A bad batch breaks the loss within this many logged points from the onset to the peak.
BAD_BATCH_MAX_RISE_POINTS = 2
# An LR ramp: after the schedule had begun to decay, the logged LR climbs to at least this many
# times its earlier peak. A schedule's own warm-up, cosine, linear or constant phase never exceeds
# its first peak (ratio 1.0 on the 21 dev controls and the healthy real logs); the planted ramps
# pass ×1.5 within 10–40 steps of their start.
LR_RAMP_OVER_PEAK = 1.5
# "Decay had begun": an earlier point lies this far below the running peak.
LR_DECAY_BEGUN = 0.05


def lr_ramp(
    evidence: Evidence, headline: Finding, incident: Incident | None
) -> tuple[int, float, float] | None:
    """(the climb's first step, the most it reached over the earlier peak, that peak) for an LR
    that climbs past LR_RAMP_OVER_PEAK × its peak after its schedule began to decay, up to the
    event's end; None otherwise."""
    if not evidence.run.has(LEARNING_RATE):
        return None
    end = incident.end_step if incident is not None else headline.step
    if incident is not None and end is None:
        end = incident.peak_step
    if end is None:
        return None
    steps, lrs = evidence.run.series(LEARNING_RATE)
    keep = np.isfinite(lrs) & (steps <= end)
    steps, lrs = steps[keep], lrs[keep]
    if lrs.size < 3:
        return None
    peaks = np.maximum.accumulate(lrs)
    decaying = np.flatnonzero(lrs < (1 - LR_DECAY_BEGUN) * peaks)
    if decaying.size == 0:
        return None  # still warming up, or constant: a climb here is the schedule's own
    # The peak the climb is measured against: the schedule's, when its decay began.
    peak = float(peaks[decaying[0]])
    later = np.arange(lrs.size) > decaying[0]
    above = np.flatnonzero(later & (lrs >= LR_RAMP_OVER_PEAK * peak))
    if above.size == 0:
        return None
    first = int(above[0])
    # The climb's first step: where the LR last stopped falling before it passed the mark.
    start = first
    while start > decaying[0] and lrs[start - 1] < lrs[start]:
        start -= 1
    return int(steps[start]), float(lrs[first:].max() / peak), peak


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


def bad_batch_reasons(evidence: Evidence, incident: Incident) -> str:
    reasons = []
    lr_note = lr_change_note(evidence, incident)
    if lr_note is not None:
        reasons.append(lr_note)
    if evidence.run.has(GRAD_NORM):
        _, grads = window(evidence.run, GRAD_NORM, incident.onset_step, incident.peak_step)
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
    return (
        f"the learning rate followed its schedule smoothly ({fmt(float(lrs[0]))} → "
        f"{fmt(float(lrs[-1]))}, no jump)"
    )
