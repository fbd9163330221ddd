"""Causes compete for each incident: every candidate is scored on the same evidence.

A candidate is a finding that names a cause (an LR jump, a resume, an optimizer reset, frozen
parameters, non-finite weights, a bad batch or repeated data named by the data explainers, a
replay's what-if), or an explanation inferred where no finding names one: a bad batch from the
spike's shape (an LR ramp is the lr_ramp rule's measured finding, explainers/lr_ramp.py). Each
is scored on three terms, summed:

- measured: a rule measured the cause on the run's own data (the LR logged, checkpoints, a
  replay) and raised it to an alert — an inference from the loss's shape alone is not;
- timed: it acts where the incident starts (at most CAUSE_LOOKBACK_STEPS before the onset, a bad
  batch at most one step, ONE_STEP_CAUSE_LOOKBACK, and not after the incident ends; a checkpoint
  finding: its checkpoint window holds the onset);
- shape: the incident looks like what this cause does — a one-step break that recovers (a bad
  batch, a transient LR jump), a rise over several points (a ramp, a too-short warm-up), a level
  that does not come back (a resume, a persistent LR jump, an optimizer reset).

The weights are powers of two, so the terms decide in order: any measured cause beats any
inference, then timing, then shape. That order is what the dev split measured (bench/accuracy,
95 runs, CAUSE_TERM_PRECISION): a measured candidate is right 97% of the time, a timed one 70%,
one whose shape fits 65%. The verdict names the
best candidate; every other one is an alternative with the term it failed. Where only an
inference is left and the evidence cannot separate it from another cause (no LR logged, a slow
rise), the cause is `undetermined` with what would decide it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tscope.analyzers.base import Evidence
from tscope.analyzers.categories import CAUSES
from tscope.analyzers.cause_evidence import (
    BAD_BATCH_MAX_RISE_POINTS,
    bad_batch_reasons,
    no_candidate_reason,
    rise_points,
    undecided_reason,
    weights_followed_the_loss,
)
from tscope.analyzers.incidents import Incident
from tscope.analyzers.reach import CAUSE_LOOKBACK_STEPS, ONE_STEP_CAUSE_LOOKBACK
from tscope.analyzers.spike_judgement import is_notable
from tscope.model import Finding
from tscope.model.categories import ALERT_SEVERITIES
from tscope.model.metric_names import is_loss_like

# The three evidence terms' weights (see the module docstring; powers of two: lexicographic).
WEIGHT_MEASURED = 4
WEIGHT_TIMED = 2
WEIGHT_SHAPE = 1
# Measured on the dev split (scripts/measure_cause_terms.py; bench/accuracy, 95 runs,
# 2026-12-01): of the candidates each term holds for, how many name the planted cause in its
# window (right, candidates). Measured 0.97 > timed 0.70 > shape 0.65: the order of the weights.
# By combination: measured+timed(+shape) 70/72, timed+shape only 7/25, timed only 2/16; the
# winner was right 59 of 59 times it was named.
CAUSE_TERM_PRECISION = {"measured": (70, 72), "timed": (79, 113), "shape": (37, 57)}

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
LR_RAMP = "lr_ramp"
SHAPES: dict[str, frozenset[str]] = {
    "bad_batch": frozenset({"one_step"}),
    "repeated_data": frozenset({"one_step", "ramp"}),
    "data_aligned_spike": frozenset({"one_step"}),
    # The loss climbs for as long as the LR stays raised: one step, a few (a transient jump held
    # for a window), or for good (a persistent one).
    "lr_schedule_jump": frozenset({"one_step", "ramp", "level_shift"}),
    "lr_too_high": frozenset({"ramp", "level_shift"}),
    # The loss climbs while the LR climbs, and stays up while it stays raised. Without a shape it
    # lost to lr_too_high at the blow-up it caused (a blind set's ExponentialLR ×1.022 from step
    # 100 read "LR too high" dated 319, session 29): at equal score the ramp acts first.
    LR_RAMP: frozenset({"ramp", "level_shift"}),
    "warmup_too_short": frozenset({"ramp", "one_step"}),
    "resume_discontinuity": frozenset({"level_shift", "one_step"}),
    "checkpoint_incomplete": frozenset({"level_shift", "one_step"}),
    "optimizer_state_reset": frozenset({"level_shift", "ramp"}),
    "loss_scale_collapse": frozenset({"one_step", "ramp", "level_shift"}),
    "nonfinite_weights": frozenset({"level_shift"}),
    "nonfinite_origin": frozenset({"level_shift", "one_step"}),
}
# Causes that are a level rather than an event: an LR too high for the run. At equal score and
# lead, the event that brought the level about explains it (an LR jump logged at the same step
# as the blow-up, when the log samples every 10 steps: the LR is too high because it jumped).
# Measured: bench/accuracy dev and holdout7-12 unchanged (no tie of the two there); it names the
# jump on MMEngine's own log of an LR ×30 logged every 10 iterations
# (fixtures/data/step_lines_real/mmengine/lr_jump/train_interval10.log.gz).
LEVEL_CAUSES = frozenset({"lr_too_high"})
# A resume seen from checkpoints is the same event as the resume seen in the logs: the category
# the verdict names for a checkpoint_incomplete the run resumed from.
RESUME = "resume_discontinuity"
# Categories that describe one event from different evidence (the logs' resume, the optimizer's
# restarted step counter): within SAME_EVENT_STEPS of each other they corroborate, not compete.
SAME_EVENT = (frozenset({RESUME, "optimizer_state_reset"}),)
SAME_EVENT_STEPS = 2


@dataclass(frozen=True)
class Candidate:
    category: str
    finding: Finding | None  # None: inferred from the loss's shape or the logged LR
    step: int | None
    measured: bool
    timed: bool
    shape: bool
    support: str  # the evidence for it, in words
    # Where the cause starts acting, when before its step: a missing warm-up acts from the run's
    # first update, whatever step its instability shows at (`_lead`).
    acts_from: int | None = None

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
    # Matched by step only, a cause joins an incident it precedes only when that incident
    # matters itself: an optimizer reset at a resume (150) took the card of a one-point gradient
    # blip at 187, "cause undetermined" (planted-cause hunt, session 26). At the incident's own
    # steps it joins any (a replay's bad batch at the 1.19× bump it explains). Other findings
    # join any incident in reach, whose cause competition explains them (an update-ratio
    # warning at 190 beside a gradient blip there, caused by an LR ramp).
    is_cause = finding.category in CAUSES or finding.category in CHECKPOINT_CAUSES
    if finding.step is not None:
        for incident in incidents:
            end = incident.end_step if incident.end_step is not None else incident.peak_step
            reach = (
                incident.onset_step
                if is_cause and incident.severity not in ALERT_SEVERITIES
                else incident.onset_step - CAUSE_LOOKBACK_STEPS
            )
            if reach <= finding.step <= end:
                return incident
    if is_cause:
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
    candidates.extend(_from_replay(findings, incident, shape))
    candidates.extend(_inferred(evidence, headline, incident, shape))
    # Only a candidate that acts where the incident starts may explain it; the others stay as
    # alternatives. Best score first; at equal score the one that acts first, then the ranking's
    # order (the findings list).
    order = {id(c): position for position, c in enumerate(candidates)}
    ranked = sorted(
        candidates,
        key=lambda c: (not c.timed, -c.score, _lead(c), c.category in LEVEL_CAUSES, order[id(c)]),
    )
    best = ranked[0] if ranked and ranked[0].timed else None
    if best is not None and not best.measured:
        reason = undecided_reason(evidence, incident, best.category)
        if reason:
            return Verdict(None, tuple(ranked), reason)
    if best is None:
        return Verdict(None, tuple(ranked), no_candidate_reason(evidence, incident))
    return Verdict(best, tuple(ranked), "")


def _lead(candidate: Candidate) -> float:
    """At equal score the cause that acts first explains the rest (a cause precedes its effects:
    an LR jump at 77 before the instability a warm-up rule dates at 78)."""
    start = candidate.acts_from if candidate.acts_from is not None else candidate.step
    return float(start) if start is not None else float("inf")


def _is_candidate(evidence: Evidence, finding: Finding, headline: Finding) -> bool:
    if finding.category == "checkpoint_incomplete":
        return finding.evidence.get("resumed_from") is not None
    if finding.category == "nonfinite_weights" and weights_followed_the_loss(evidence, finding):
        return False
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
    step = finding.step
    if finding.category == "checkpoint_incomplete":
        # The event is the resume from the incomplete checkpoint, not the checkpoint's own step.
        resumed = finding.evidence.get("resume_step")
        step = resumed if isinstance(resumed, int) else step
    return Candidate(
        category,
        finding,
        step,
        measured=finding.severity in ALERT_SEVERITIES,
        timed=timed,
        shape=shape is not None and shape in SHAPES.get(category, frozenset()),
        support=finding.message.rstrip("."),
        acts_from=_acts_from(evidence, finding),
    )


def _acts_from(evidence: Evidence, finding: Finding) -> int | None:
    """A run with no warm-up at all is at its full LR from the first update: the cause precedes a
    bad batch found at the same step (an early one-step break with a large gradient norm is first
    the update's, issue 11's W&B run). A warm-up that was merely short stays at its instability's
    step: an LR jump after it is the nearer cause."""
    if finding.category == "warmup_too_short" and finding.evidence.get("warmup_steps") == 0:
        return evidence.run.first_step
    return None


# The evidence key of the last step a lasting cause acts at.
ACTS_UNTIL = {LR_RAMP: "top_step", "repeated_data": "last_step"}


def _timed(evidence: Evidence, finding: Finding, incident: Incident) -> bool:
    if incident.spike is not None and finding.spike_id == incident.spike.id:
        return True
    if finding.step is None:
        return False
    end = incident.end_step if incident.end_step is not None else incident.peak_step
    lookback = ONE_STEP_CAUSE_LOOKBACK.get(finding.category, CAUSE_LOOKBACK_STEPS)
    # A ramp acts from its start until the LR tops out, not at its start alone: holdout15's
    # trainer_llama-lr_ramp-16 climbed x1.043 per step from 79 to 190 (x112), and its incident at
    # 190 was "undetermined" because the start lay more than the lookback before it.
    # Repeated data acts until its last repeated step: the loss jumps when fresh batches return
    # to a model that memorised the repeated ones (a fresh verification run, session 26: stuck
    # from 900 to 1099, the spike at 1100 was "undetermined").
    acting_until = finding.evidence.get(ACTS_UNTIL.get(finding.category, ""))
    last_act = acting_until if isinstance(acting_until, int) else finding.step
    if finding.step <= end and incident.onset_step - lookback <= max(finding.step, last_act):
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


# A replay what-if that removes the spike measures its cause: skipping the batch (or dropping
# the flagged samples) or the same batches still spiking from an earlier state → the data; a
# smaller LR or clipping → the step size (analyzers/replay/effects.py reads them alike).
REPLAY_CAUSES = {"skip": "bad_batch", "lr": "lr_too_high", "clip": "lr_too_high"}


def _from_replay(
    findings: list[Finding], incident: Incident | None, shape: str | None
) -> list[Candidate]:
    if incident is None:
        return []
    end = incident.end_step if incident.end_step is not None else incident.peak_step
    found = []
    for finding in findings:
        what_if = str(finding.evidence.get("what_if", ""))
        if (
            finding.category != "intervention_effect"
            or finding.evidence.get("spike_removed") is not True
            or finding.step is None
            or not incident.onset_step <= finding.step <= end
        ):
            continue
        category = REPLAY_CAUSES.get("skip" if "samples" in finding.evidence else what_if, "")
        if category:
            found.append(
                Candidate(
                    category,
                    finding,
                    finding.step,
                    measured=True,
                    timed=True,
                    shape=shape is not None and shape in SHAPES[category],
                    support=finding.message.split(". ")[0].rstrip("."),
                )
            )
    return found


def _inferred(
    evidence: Evidence, headline: Finding, incident: Incident | None, shape: str | None
) -> list[Candidate]:
    found = []
    # Only for a spike worth a warning by the impact rule: a bump below it is no incident to
    # explain, and a checkpoint statistic whose window holds one (holdout16 trainer_gpt2-
    # control-102: a 1.17× bump for two steps) was headlined "most likely a bad batch (0.95)".
    # Nor for a loss spike its own finding judged routine (`spike_judgement.is_notable`: a
    # recovered excursion under 1.5× at a steady LR, a lasting rise the eval loss did not share):
    # a helper-made run whose training text changed at step 200 had an info loss spike there and
    # an eval_divergence headline, and the verdict still read "most likely a bad batch (0.70)".
    if (
        incident is not None
        and incident.kind == "spike"
        and incident.end_step is not None
        and incident.severity != "info"
        and (
            incident.spike is None
            or not is_loss_like(incident.spike.metric)
            or is_notable(evidence.run, incident.spike, evidence.spikes)
        )
    ):
        found.append(
            Candidate(
                "bad_batch",
                None,
                incident.peak_step,
                measured=False,
                timed=True,
                shape=shape == "one_step",
                support=bad_batch_reasons(evidence, incident).rstrip("."),
            )
        )
    return found
