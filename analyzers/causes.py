"""Causes compete for each incident: every candidate is scored on the same evidence.

A candidate is a finding that names a cause (an LR jump, a resume, an optimizer reset, frozen
parameters, non-finite weights, a bad batch or repeated data named by the data explainers, a
replay's what-if), or an explanation inferred where no finding names one: a bad batch from the
spike's shape, an LR ramp from the logged LR. Each is scored on three terms, summed:

- measured: a rule measured the cause on the run's own data (the LR logged, checkpoints, a
  replay) and raised it to an alert — an inference from the loss's shape alone is not;
- timed: it acts where the incident starts (at most CAUSE_LOOKBACK_STEPS before the onset and
  not after the incident ends; a checkpoint finding: its checkpoint window holds the onset);
- shape: the incident looks like what this cause does — a one-step break that recovers (a bad
  batch, a transient LR jump), a rise over several points (a ramp, a too-short warm-up), a level
  that does not come back (a resume, a persistent LR jump, an optimizer reset).

The weights are powers of two, so the terms decide in order: any measured cause beats any
inference, then timing, then shape. That order is what the dev split measured (bench/accuracy,
95 runs, see CAUSE_TERM_PRECISION): a measured candidate is right far more often than a timed
one, and a timed one more often than one whose only support is its shape. The verdict names the
best candidate; every other one is an alternative with the term it failed. Where only an
inference is left and the evidence cannot separate it from another cause (no LR logged, a slow
rise), the cause is `undetermined` with what would decide it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.learning_rate import lr_jumps
from tscope.analyzers.incidents import Incident
from tscope.analyzers.ranking import CAUSE_LOOKBACK_STEPS
from tscope.analyzers.signals import fmt, window
from tscope.model import Finding
from tscope.model.categories import ALERT_SEVERITIES, CAUSES, words
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE

# The three evidence terms' weights (see the module docstring; powers of two: lexicographic).
WEIGHT_MEASURED = 4
WEIGHT_TIMED = 2
WEIGHT_SHAPE = 1
# Measured on the dev split (bench/accuracy, 95 runs, 2026-12-01, scripts in the report of issue
# 11): of the candidates each term holds for, the share that names the planted cause in its
# window (right / candidates). The order of these shares is the order of the weights.
CAUSE_TERM_PRECISION = {"measured": (0, 0), "timed": (0, 0), "shape": (0, 0)}

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
# The verdict's cause when no candidate wins (the card says what would decide).
UNDETERMINED = "undetermined"

# Findings that name a cause although their role is context: what checkpoints (or the cluster)
# measure about an event that changes training. checkpoint_incomplete joins only when the run
# resumed from the incomplete checkpoint (it then names the resume).
CHECKPOINT_CAUSES = (
    "optimizer_state_reset",
    "frozen_parameters",
    "nonfinite_weights",
    "data_aligned_spike",
    "checkpoint_incomplete",
)
# The shapes each cause gives the loss (one_step: breaks within BAD_BATCH_MAX_RISE_POINTS and
# recovers; ramp: rises over more points; level_shift: does not come back). Frozen parameters
# have no shape: a block that stops training slows learning, it does not break the loss.
SHAPES: dict[str, frozenset[str]] = {
    "bad_batch": frozenset({"one_step"}),
    "repeated_data": frozenset({"one_step", "ramp"}),
    "data_aligned_spike": frozenset({"one_step"}),
    "lr_schedule_jump": frozenset({"one_step", "level_shift"}),
    "lr_too_high": frozenset({"ramp", "level_shift"}),
    "warmup_too_short": frozenset({"ramp", "one_step"}),
    "resume_discontinuity": frozenset({"level_shift", "one_step"}),
    "checkpoint_incomplete": frozenset({"level_shift", "one_step"}),
    "optimizer_state_reset": frozenset({"level_shift", "ramp"}),
    "loss_scale_collapse": frozenset({"one_step", "ramp", "level_shift"}),
    "nonfinite_weights": frozenset({"level_shift"}),
    "nonfinite_origin": frozenset({"level_shift", "one_step"}),
}
# A resume seen from checkpoints is the same event as the resume seen in the logs: the category
# the verdict names for a checkpoint_incomplete the run resumed from.
RESUME = "resume_discontinuity"


@dataclass(frozen=True)
class Candidate:
    category: str
    finding: Finding | None  # None: inferred from the loss's shape or the logged LR
    step: int | None
    measured: bool
    timed: bool
    shape: bool
    support: str  # the evidence for it, in words

    @property
    def score(self) -> int:
        return (
            WEIGHT_MEASURED * self.measured + WEIGHT_TIMED * self.timed + WEIGHT_SHAPE * self.shape
        )


@dataclass(frozen=True)
class Verdict:
    """The competition's outcome: the winner (None: undetermined) and every candidate."""

    winner: Candidate | None
    candidates: tuple[Candidate, ...]
    undetermined_because: str  # "" when a candidate wins


def incident_shape(evidence: Evidence, incident: Incident | None) -> str | None:
    """one_step | ramp | level_shift; None without an incident."""
    if incident is None:
        return None
    if incident.kind == "divergence" or incident.end_step is None:
        return "level_shift"
    return "one_step" if rise_points(evidence, incident) <= BAD_BATCH_MAX_RISE_POINTS else "ramp"


def incident_of(finding: Finding, incidents: list[Incident]) -> Incident | None:
    """The incident `finding` describes or explains; None when it stands apart from every one."""
    if finding.category == "loss_divergence":
        for incident in incidents:
            if incident.kind == "divergence":
                return incident
    for incident in incidents:
        if incident.spike is not None and incident.spike.id == finding.spike_id:
            return incident
    if finding.step is not None:
        for incident in incidents:
            end = incident.end_step if incident.end_step is not None else incident.peak_step
            if incident.onset_step - CAUSE_LOOKBACK_STEPS <= finding.step <= end:
                return incident
    if finding.category in CAUSES or finding.category in CHECKPOINT_CAUSES:
        return None  # a cause with no incident in reach is its own news, not a far spike's
    if finding.source == "checkpoints":
        return None  # a checkpoint window's statistic: no loss incident it overlaps
    return incidents[0] if incidents else None


def compete(
    evidence: Evidence, headline: Finding, incident: Incident | None, findings: list[Finding]
) -> Verdict:
    """Score every candidate for the headline's incident (or the headline's own event)."""
    shape = incident_shape(evidence, incident)
    candidates = [
        _from_finding(evidence, f, headline, incident, shape)
        for f in findings
        if _is_candidate(evidence, f, headline)
    ]
    candidates.extend(_inferred(evidence, headline, incident, shape))
    # Only a candidate that acts where the incident starts may explain it; the others stay as
    # alternatives. Best score first; at equal score the ranking's order (the findings list).
    order = {id(c): position for position, c in enumerate(candidates)}
    ranked = sorted(candidates, key=lambda c: (not c.timed, -c.score, order[id(c)]))
    best = ranked[0] if ranked and ranked[0].timed else None
    if best is not None and not best.measured:
        reason = _undecided(evidence, incident, best)
        if reason:
            return Verdict(None, tuple(ranked), reason)
    if best is None:
        return Verdict(None, tuple(ranked), _no_candidate_reason(evidence, incident))
    return Verdict(best, tuple(ranked), "")


def _is_candidate(evidence: Evidence, finding: Finding, headline: Finding) -> bool:
    if finding.category == "checkpoint_incomplete":
        return finding.evidence.get("resumed_from") is not None
    if finding.category in CAUSES or finding.category in CHECKPOINT_CAUSES:
        return finding.severity in ALERT_SEVERITIES or _same_event(finding, headline)
    return False


def _same_event(finding: Finding, headline: Finding) -> bool:
    """An info-level finding about the headline's own event (the resume a checkpoint shows)."""
    return (
        finding.step is not None
        and headline.step is not None
        and abs(finding.step - headline.step) <= 2
        and headline.category in (*CHECKPOINT_CAUSES, RESUME)
        and finding.category == RESUME
    )


def _from_finding(
    evidence: Evidence,
    finding: Finding,
    headline: Finding,
    incident: Incident | None,
    shape: str | None,
) -> Candidate:
    category = RESUME if finding.category == "checkpoint_incomplete" else finding.category
    if incident is None:
        # The headline is its own event: its candidates are the headline and what names the
        # same event (a resume seen in the logs and in the checkpoints).
        timed = (
            finding is headline
            or _same_event(finding, headline)
            or (
                finding.step is not None
                and headline.step is not None
                and abs(finding.step - headline.step) <= 2
            )
        )
    else:
        timed = _timed(evidence, finding, incident)
    return Candidate(
        category,
        finding,
        finding.step,
        measured=finding.severity in ALERT_SEVERITIES,
        timed=timed,
        shape=shape is not None and shape in SHAPES.get(category, frozenset()),
        support=finding.message.rstrip("."),
    )


def _timed(evidence: Evidence, finding: Finding, incident: Incident) -> bool:
    if incident.spike is not None and finding.spike_id == incident.spike.id:
        return True
    if finding.step is None:
        return False
    end = incident.end_step if incident.end_step is not None else incident.peak_step
    if incident.onset_step - CAUSE_LOOKBACK_STEPS <= finding.step <= end:
        return True
    if finding.source == "checkpoints" and evidence.checkpoints is not None:
        # Placed at a checkpoint: the window from the previous checkpoint holds the onset.
        earlier = [
            s.info.step
            for s in evidence.checkpoints.snapshots
            if s.info.step is not None and s.info.step < finding.step
        ]
        start = max(earlier) if earlier else 0
        return start < incident.onset_step <= finding.step
    return False


def _inferred(
    evidence: Evidence, headline: Finding, incident: Incident | None, shape: str | None
) -> list[Candidate]:
    found = []
    if incident is not None and incident.kind == "spike" and incident.end_step is not None:
        found.append(
            Candidate(
                "bad_batch",
                None,
                incident.peak_step,
                measured=False,
                timed=True,
                shape=shape == "one_step",
                support=_bad_batch_reasons(evidence, incident).rstrip("."),
            )
        )
    ramp = _lr_ramp(evidence, headline, incident)
    if ramp is not None:
        step, ratio, peak = ramp
        found.append(
            Candidate(
                "lr_too_high",
                None,
                step,
                measured=False,
                timed=True,
                shape=shape is None or shape in SHAPES["lr_too_high"],
                support=(
                    f"the logged learning rate climbed to ×{fmt(ratio)} its earlier peak "
                    f"({fmt(peak)}) from step {step}, after the schedule had begun to decay"
                ),
            )
        )
    return found


def _lr_ramp(
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


def _undecided(evidence: Evidence, incident: Incident | None, best: Candidate) -> str:
    """Why an inferred candidate cannot be named; "" when the evidence allows it."""
    if best.category != "bad_batch" or incident is None:
        return ""
    rise = rise_points(evidence, incident)
    if not evidence.run.has(LEARNING_RATE):
        # A transient LR jump breaks the loss in one step too: without the LR the logs cannot
        # tell it from a bad batch.
        return _no_lr_reasons(incident, rise)
    if rise > BAD_BATCH_MAX_RISE_POINTS:
        return _slow_rise_reasons(evidence, incident, rise)
    return ""


def _no_candidate_reason(evidence: Evidence, incident: Incident | None) -> str:
    if incident is None or incident.kind != "spike" or incident.end_step is None:
        return ""  # a divergence or a NaN with no cause in reach is its own description
    if not evidence.run.has(LEARNING_RATE):
        return _no_lr_reasons(incident, rise_points(evidence, incident))
    return (
        "no logged cause acts where the incident starts; a replay of the steps around "
        f"{incident.peak_step} (`tscope replay --around {incident.peak_step}`) would decide"
    )


def rise_points(evidence: Evidence, incident: Incident) -> int:
    """Logged loss points from the onset to the peak (1: the loss broke in one step)."""
    steps, _ = evidence.run.series(incident.metric)
    return int(((steps > incident.onset_step) & (steps <= incident.peak_step)).sum()) + 1


def _no_lr_reasons(incident: Incident, rise: int) -> str:
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


def _slow_rise_reasons(evidence: Evidence, incident: Incident, rise: int) -> str:
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


def _bad_batch_reasons(evidence: Evidence, incident: Incident) -> str:
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


def against(candidate: Candidate, winner: Candidate | None, shape: str | None) -> str:
    """The specific reason a losing candidate explains the incident less well."""
    name = words(candidate.category)
    where = f" (step {candidate.step})" if candidate.step is not None else ""
    if winner is not None and candidate.category == winner.category:
        return f"{name}{where} names the same cause as the verdict: it corroborates"
    if not candidate.timed:
        return f"less likely {name}{where}: it does not act where the incident starts"
    if candidate.category == "bad_batch" and candidate.finding is None:
        if shape == "ramp":
            return (
                "not a bad batch: the loss rose over several logged points before its peak; "
                "one bad batch breaks it in one step"
            )
        if winner is not None and winner.category == "warmup_too_short":
            return (
                "less likely a bad batch: the break came early in a run whose LR had no (or too "
                "short a) warm-up, where the update itself is the usual culprit; a bad batch "
                "would break the loss again when its steps are replayed at a lower LR (`tscope "
                f"replay --around {candidate.step}` tells them apart)"
            )
        if winner is not None:
            return f"not a bad batch alone: {words(winner.category)} precedes the spike"
    if not candidate.measured:
        return f"less likely {name}: inferred only, while the verdict's cause was measured"
    if not candidate.shape and shape is not None:
        return f"less likely {name}{where}: the incident's shape ({shape.replace('_', ' ')}) is not the one it gives"
    return f"less likely {name}{where}: ranked below the verdict's cause on the same evidence"
