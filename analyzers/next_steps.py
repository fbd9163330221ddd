"""What to do after the verdict: the restart checkpoint, the next steps, the explanations the
evidence argues against and what it cannot show (the verdict itself is analyzers/summary.py)."""

from __future__ import annotations

import shlex

from tscope.analyzers.base import Evidence
from tscope.analyzers.cause_alternatives import against, corroborates
from tscope.analyzers.cause_evidence import lr_change_note
from tscope.analyzers.causes import compete, incident_of, incident_shape
from tscope.analyzers.incidents import Incident
from tscope.model import Alternative, CheckpointInfo, Finding
from tscope.model.categories import ALERT_SEVERITIES
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE, LOSS_SCALE

# A resume (or a checkpoint one could have restarted from) farther than this from an incident's
# onset is not its cause: a resume acts on the first updates after it (resume_window.py), and
# the alternatives line rules it out in these words.
RESUME_RULED_OUT_STEPS = 100


def incident_step(headline: Finding, incident: Incident | None) -> int | None:
    """The step the card shows and the chart zooms to: the incident's peak, else the finding's."""
    if incident is not None:
        return incident.onset_step if incident.kind == "divergence" else incident.peak_step
    return headline.step


def restart_checkpoint(
    headline: Finding,
    incident: Incident | None,
    checkpoints: list[CheckpointInfo],
    per_checkpoint_step: int = 1,
) -> CheckpointInfo | None:
    """The newest checkpoint before whichever came first, the cause or the incident: the newest
    whose state precedes the onset step's update (see _precedes), its step taken onto the log's
    axis (`per_checkpoint_step` logged steps each: step_axes.py)."""
    onset = first_step(headline, incident)
    before = [
        c for c in checkpoints if onset is not None and _precedes(c, onset, per_checkpoint_step)
    ]
    return max(before, key=lambda c: c.step or 0) if before else None


# Formats whose checkpoint step N is the state the logged step N starts from: nanoGPT saves
# iter_num N before update N; Lightning's step=N.ckpt holds N updates and its loggers number the
# next batch N. A Trainer's checkpoint-N comes after the update logged as step N.
STATE_BEFORE_LOGGED_STEP = frozenset({"nanogpt", "lightning"})


def _precedes(checkpoint: CheckpointInfo, onset: int, per_checkpoint_step: int = 1) -> bool:
    if checkpoint.step is None:
        return False
    logged = checkpoint.step * per_checkpoint_step
    if checkpoint.format in STATE_BEFORE_LOGGED_STEP:
        return logged <= onset
    return logged < onset


def first_step(headline: Finding, incident: Incident | None) -> int | None:
    candidates = [
        s for s in (headline.step, incident.onset_step if incident else None) if s is not None
    ]
    return min(candidates) if candidates else None


def next_steps(
    evidence: Evidence,
    headline: Finding,
    incident: Incident | None,
    checkpoints: list[CheckpointInfo],
    restart: CheckpointInfo | None,
    per_step: int = 1,
    cause: Finding | None = None,
) -> list[str]:
    """The named cause's suggestion (else the headline's), the restart point (its step on the
    log's axis when the log counts `per_step` micro-batches per checkpoint step) and the replay
    that would test a fix. A divergence's own advice is about the LR: under a verdict naming
    repeated data it told the reader to lower the LR (planted-cause hunt, session 26)."""
    steps = [cause.suggestion if cause is not None and cause.suggestion else headline.suggestion]
    onset = first_step(headline, incident)
    if onset is None:
        return steps
    if restart is not None:
        holds = (
            "with optimizer state" if restart.has_optimizer else "weights only: no optimizer state"
        )
        where = (
            f"step {restart.step}"
            if per_step == 1 or restart.step is None
            else f"update {restart.step}, logged step {restart.step * per_step}: the log counts "
            f"{per_step} micro-batches per update"
        )
        steps.append(
            f"Restart point: `{restart.path}` ({where}, {holds}), the newest "
            f"checkpoint from before step {onset}'s update."
        )
        step = incident_step(headline, incident)
        if restart.has_optimizer and step is not None and headline.source == "logs":
            # A replay from that checkpoint names the samples and tests a fix before a restart.
            run_path = evidence.run.path or "RUN"
            where = ""
            if "://" in run_path:  # an object-store URL: replay runs the model on local files
                where = f" Replay reads local files: copy the run from {run_path} first."
                run_path = "LOCAL_COPY"
            # Quoted for the shell: the run folder's name is the stranger's, and `;` or `$(...)`
            # in it ran a command when the line was pasted (red team, session 27).
            steps.append(
                f"Replay the steps around it to name the samples and test a fix: "
                f"`tscope replay {shlex.quote(run_path)} --around {step} "
                "--entry replay_entry.py` "
                f"(replay_entry.py builds your model; see examples/).{where}"
            )
    elif checkpoints:
        steps.append(f"No checkpoint precedes step {onset}: restart from scratch.")
    return steps


def alternatives(
    evidence: Evidence, incidents: list[Incident], findings: list[Finding]
) -> list[Alternative]:
    """Explanations the evidence argues against for the headline's incident, with the reason:
    first the causes that lost the competition (analyzers/causes.py), then the usual suspects
    the evidence rules out."""
    alerts = [f for f in findings if f.severity in ALERT_SEVERITIES]
    if not alerts:
        return []
    headline = alerts[0]
    incident = incident_of(headline, incidents)
    verdict = compete(evidence, headline, incident, findings)
    shape = incident_shape(evidence, incident)
    spike_id = incident.spike.id if incident is not None and incident.spike else None
    ruled_out = []
    named = {verdict.winner.category} if verdict.winner is not None else set()
    for candidate in verdict.candidates:
        if candidate is verdict.winner or candidate.category in named:
            continue
        if corroborates(candidate, verdict.winner):
            continue  # the verdict's own event seen from other evidence (the summary says so)
        named.add(candidate.category)
        ruled_out.append(
            Alternative(candidate.category, against(candidate, verdict.winner, shape), spike_id)
        )
    if incident is None:
        return ruled_out
    categories = {f.category for f in alerts} | named
    lr_note = lr_change_note(evidence, incident)
    if lr_note is not None and not categories & {"lr_schedule_jump", "lr_too_high"}:
        ruled_out.append(
            Alternative(
                "lr_schedule_jump",
                f"not an LR schedule problem: {lr_note} through the incident",
                spike_id,
            )
        )
    resumes = [
        e
        for e in evidence.run.events_of("resume")
        if abs(e.step - incident.onset_step) <= RESUME_RULED_OUT_STEPS
    ]
    if not resumes and "resume_discontinuity" not in categories:
        ruled_out.append(
            Alternative(
                "resume_discontinuity",
                # A resume the log does not record is only ruled out where no checkpoint it
                # could have restarted from lies before the onset.
                f"not a resume: no resume point within {RESUME_RULED_OUT_STEPS} steps of the onset"
                if not _checkpoint_before(evidence, incident.onset_step)
                else f"no resume recorded within {RESUME_RULED_OUT_STEPS} steps of the onset, and "
                "the loss did not return to its untrained level there (as it does when a resume "
                "loses the weights)",
                spike_id,
            )
        )
    if evidence.run.has(LOSS_SCALE) and "loss_scale_collapse" not in categories:
        ruled_out.append(
            Alternative(
                "loss_scale_collapse",
                "not fp16 overflow: the loss scale did not collapse",
                spike_id,
            )
        )
    if incident.kind == "spike" and incident.end_step is not None:
        ruled_out.append(
            Alternative(
                "loss_divergence",
                f"not a divergence: the loss was back to baseline by step {incident.end_step}",
                spike_id,
            )
        )
    drifts = [
        cp
        for cp in evidence.change_points
        if cp.metric == incident.metric
        and cp.step < incident.onset_step
        and cp.after_mean > cp.before_mean
        and incident.onset_step - cp.step <= 200
    ]
    if not drifts:
        ruled_out.append(
            Alternative(
                "slow_drift",
                "not a slow drift: no upward regime shift in the "
                "loss before the onset (CUSUM, PELT)",
                spike_id,
            )
        )
    return ruled_out


def limits(evidence: Evidence, has_checkpoints: bool) -> list[str]:
    """What the evidence cannot show, in the reader's words."""
    run = evidence.run
    notes = []
    if not has_checkpoints:
        notes.append(
            "Logs only: which layer started the incident needs checkpoints (weights, optimizer "
            "state) or a replay of the steps around it."
        )
    for metric, consequence in (
        (GRAD_NORM, "whether gradients moved before the loss cannot be told"),
        (LEARNING_RATE, "schedule problems cannot be ruled in or out"),
    ):
        if not run.has(metric):
            notes.append(f"{metric} was not logged: {consequence}.")
    if run.partial:
        notes.append(
            f"{len(run.partial)} input(s) could not be fully read (see Inputs): the case is partial."
        )
    return notes


def _checkpoint_before(evidence: Evidence, onset: int) -> bool:
    """A checkpoint saved within RESUME_RULED_OUT_STEPS before the onset: a resume from it is
    possible."""
    steps = evidence.checkpoints.steps if evidence.checkpoints is not None else []
    return any(0 <= onset - step <= RESUME_RULED_OUT_STEPS for step in steps)
