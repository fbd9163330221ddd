"""The first screen's verdict: healthy, not judged, or the headline incident in one sentence with
its cause. What to do next, what was ruled out and what is unknown are analyzers/next_steps.py."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.baseline import BASELINE_WINDOW_POINTS
from tscope.analyzers.calibration import calibrated_confidence
from tscope.analyzers.card import cause_words, incident_card
from tscope.analyzers.cause_alternatives import corroborates
from tscope.analyzers.causes import UNDETERMINED, Verdict, compete, incident_of
from tscope.analyzers.detectors.spike_score import SPIKE_SCORE_MIN_POINTS
from tscope.analyzers.impact import short_bump_bound
from tscope.analyzers.incidents import Incident
from tscope.analyzers.next_steps import (
    alternatives,
    incident_step,
    limits,
    next_steps,
    restart_checkpoint,
)
from tscope.analyzers.ranking import (
    CAUSE_CATEGORIES,
    STANDALONE_CATEGORIES,
)
from tscope.analyzers.signals import fmt, primary_loss, spike_size
from tscope.analyzers.step_axes import logged_steps_per_checkpoint_step
from tscope.model import CheckpointInfo, Finding
from tscope.model.categories import ALERT_SEVERITIES
from tscope.model.visible_text import sentence_start, visible

# alternatives and limits are imported from here by the pipeline with summarize.
__all__ = ["Diagnosis", "alternatives", "limits", "missing_data", "summarize"]

# Fewer logged loss points than this and "no incident" means "not judged": the spike score needs
# 20 points before it scores anything (detectors.spike_score.SPIKE_SCORE_MIN_POINTS) and the
# robust baseline 8 before the first judged point (baseline.MIN_BASELINE_POINTS), so a shorter
# log cannot show a spike, a plateau or a divergence — the status says so instead of "healthy".
MIN_LOSS_POINTS_TO_JUDGE = SPIKE_SCORE_MIN_POINTS
# Alerts that need no loss baseline to be sure of: a NaN/Inf or an fp16 loss-scale collapse is an
# incident in a 10-point log too, and so is a resume read from a re-logged step or a restarted
# counter, whose jump the resume rule measures against the points before it (bench/ood ood119:
# weights lost at a resume in a 14-point Trainer log, 2.79 -> 4.12, was "insufficient data").
# Measured (2026-12-06): the same warnings on the 1,500 synthetic logs of seeds 0-1,499, planted
# and healthy, and on the real logs; the thin healthy twin ood118 stays insufficient data.
NEEDS_NO_BASELINE = (
    "nan_loss",
    "nonfinite_weights",
    "nonfinite_origin",
    "loss_scale_collapse",
    "resume_discontinuity",
)
# The series named when none is the loss (the rest are counted, not listed).
MAX_NAMED_SERIES = 12


def summarize(
    evidence: Evidence,
    incidents: list[Incident],
    findings: list[Finding],
    checkpoints: list[CheckpointInfo] | None = None,
) -> dict[str, object]:
    checkpoints = checkpoints or []
    alerts = [f for f in findings if f.severity in ALERT_SEVERITIES]
    missing = missing_data(evidence)
    # The token audit (source "xray") measures the training step itself, not the loss series.
    judged_without_loss = [
        f for f in alerts if f.category in NEEDS_NO_BASELINE or f.source == "xray"
    ]
    if missing and not judged_without_loss:
        # Too few points to judge: never "healthy", and an alert on them is only what was seen
        # (a 10-point log cannot tell a divergence from a bumpy start); the findings stay listed.
        seen = f" What was seen: {alerts[0].message.rstrip('.')}." if alerts else ""
        return {
            "status": "insufficient_data",
            "verdict": "Insufficient data to judge the run: " + "; ".join(missing) + "." + seen,
            "next_steps": [_MORE_DATA_STEP],
            "headline_finding": None,
            "missing": missing,
        }
    if not alerts:
        return {
            "status": "healthy",
            "verdict": _healthy_verdict(evidence, findings),
            "next_steps": [],
            "headline_finding": None,
        }
    headline = alerts[0]
    incident = incident_of(headline, incidents)
    if (
        headline.category in CAUSE_CATEGORIES
        and headline.spike_id is None
        and headline.source == "logs"
    ):
        incident = None  # the cause itself is the news (e.g. a faulty resume with no spike yet)
    if headline.category in STANDALONE_CATEGORIES and headline.spike_id is None:
        incident = None  # overfitting, a plateau: the condition is the news, not a nearby spike
    diagnosis = _diagnose(evidence, headline, incident, findings)
    per_step = logged_steps_per_checkpoint_step(evidence)
    restart = restart_checkpoint(headline, incident, checkpoints, per_step)
    return {
        "status": "incident",
        "verdict": diagnosis.sentence(),
        "next_steps": next_steps(
            evidence, headline, incident, checkpoints, restart, per_step, diagnosis.cause
        ),
        "headline_finding": headline.id,
        "card": incident_card(
            diagnosis.what,
            headline,
            incident_step(headline, incident),
            diagnosis.cause,
            diagnosis.cause_category,
            diagnosis.confidence,
            restart,
        ),
        # The headline incident's impact on the loss (analyzers/impact.py); absent without one.
        **({"impact": incident.impact.as_dict()} if incident is not None else {}),
    }


_MORE_DATA_STEP = (
    "Log the training loss every step (or every few steps) for the whole run and analyze again; "
    "pass the run directory so every log file is found."
)


def missing_data(evidence: Evidence) -> list[str]:
    """What a verdict of "no incident" would lack; empty when the loss can be judged."""
    run = evidence.run
    loss = primary_loss(run)
    if loss is None:
        if evidence.checkpoints is not None:
            snapshots = evidence.checkpoints.snapshots
            if len(snapshots) >= 2:
                return []  # checkpoints alone are judged by the checkpoint explainers
            # One checkpoint shows its weights' state, not the changes between checkpoints
            # (update ratios, the optimizer's LR, weight growth) that date an incident.
            return [
                "no loss series and only one checkpoint: the changes between checkpoints "
                "(update ratios, the optimizer's learning rate, weight growth) need two or more"
            ]
        found = [visible(name) for name in run.metric_names]
        if not found:
            return ["no loss series was found in the inputs"]
        shown = ", ".join(found[:MAX_NAMED_SERIES]) + (
            " …" if len(found) > MAX_NAMED_SERIES else ""
        )
        return [
            f"no series could be identified as the training loss (series found: {shown}); which "
            "one is the loss? Log it as `loss`, `train_loss` or `train/loss`"
        ]
    _steps, values = run.series(loss)
    finite = int(np.isfinite(values).sum())
    if finite < MIN_LOSS_POINTS_TO_JUDGE:
        return [
            f"only {finite} finite point{'s' if finite != 1 else ''} of {loss} "
            f"(at least {MIN_LOSS_POINTS_TO_JUDGE} are needed to judge spikes, plateaus and "
            "divergence)"
        ]
    return []


def _healthy_verdict(evidence: Evidence, findings: list[Finding]) -> str:
    run = evidence.run
    loss = primary_loss(run)
    if loss is None:
        saved = evidence.checkpoints.steps if evidence.checkpoints is not None else []
        if len(saved) >= 2:
            return (
                f"No loss series was found; the {len(saved)} checkpoints (steps {saved[0]} to "
                f"{saved[-1]}) show no anomaly in their weights, updates or optimizer state."
            )
        return "No loss series was found, so no incident could be judged."
    steps, values = run.series(loss)
    notes = len(findings)
    return (
        f"No incident: {steps.size} points of {loss} from step {int(steps[0])} to "
        f"{int(steps[-1])} ({fmt(float(values[0]))} → {fmt(float(values[-1]))}); no spike, "
        "divergence or schedule anomaly crossed its threshold"
        + (f" ({notes} informational note{'s' if notes > 1 else ''} below)." if notes else ".")
        + _largest_bump_note(findings)
    )


def _largest_bump_note(findings: list[Finding]) -> str:
    """The biggest loss bump below the warning rule, named so a reader who saw it on a dashboard
    finds it judged (and how to see which rows drove it); "" when there is none."""
    bumps = [
        (impact, f)
        for f in findings
        if f.category == "loss_spike"
        and isinstance(impact := f.evidence.get("impact"), dict)
        and (impact.get("recovered") or impact.get("eval_held"))
    ]
    if not bumps:
        return ""
    impact, finding = max(bumps, key=lambda pair: float(pair[0]["excess_nats"]))
    if (
        impact.get("eval_held")
        and impact.get("severity") == "info"
        and (float(impact["ratio"]) >= short_bump_bound(bool(impact.get("early_phase"))))
    ):
        return (
            f" The largest loss bump, at step {finding.step} ({fmt(float(impact['baseline']))} "
            f"→ {fmt(float(impact['peak']))}, {fmt(float(impact['ratio']))}×), came with no "
            "rise of the eval loss: the training data changed there, not the model (see its "
            "note)."
        )
    early = bool(impact.get("early_phase"))
    bound = short_bump_bound(early)
    return (
        f" The largest loss bump, at step {finding.step} ({fmt(float(impact['baseline']))} → "
        f"{fmt(float(impact['peak']))}, {fmt(float(impact['ratio']))}×), recovered within "
        f"{int(impact['points'])} logged point{'s' if int(impact['points']) != 1 else ''}: below "
        f"the warning rule for a bump that recovers (≥ {fmt(bound)}× its level"
        + (" in the early phase, where healthy runs make short excursions" if early else "")
        + "); "
        f"`tscope replay --around {finding.step}` shows which samples drove it."
    )


def _describe_incident(incident: Incident | None) -> str:
    if incident is None:
        return ""
    if incident.kind == "divergence" and incident.abrupt_nonfinite:
        return (
            f"{incident.metric} became NaN/Inf at step {incident.onset_step} with no climb "
            "before it"
        )
    if incident.kind == "divergence":
        return f"{incident.metric} diverged from step {incident.onset_step}"
    spike = incident.spike
    assert spike is not None
    peak = "NaN/Inf" if spike.nonfinite else fmt(spike.peak_value)
    size = "" if spike.nonfinite else f" ({spike_size(spike)})"  # NaN/Inf has no σ
    if spike.end_step is None:
        recovery = " and did not recover"
    elif incident.impact.points > BASELINE_WINDOW_POINTS:
        recovery = (
            f" and took {spike.end_step - spike.onset_step} steps to come back (by step "
            f"{spike.end_step}): a setback, not a transient spike"
        )
    else:
        recovery = f" and recovered by step {spike.end_step}"
    return (
        f"{spike.metric} spiked from {fmt(spike.baseline)} to {peak} at step {spike.peak_step}"
        f"{size}{recovery}"
    )


@dataclass(frozen=True)
class Diagnosis:
    """The verdict's parts: what happened, the best explanation, and what corroborates it."""

    what: str  # sentence-started: "train/loss spiked from 2.97 to 3.41 at step 145 (…) and recovered by step 146"
    cause: Finding | None  # the finding that names the cause; None when it is inferred or unknown
    cause_category: str
    confidence: float
    because: str  # the evidence for the cause, in words; "" when the headline is the whole story
    corroboration: str  # "Checkpoints agree: …", replay what-ifs; "" when none
    lead: str = "most likely"  # "the cause is undetermined" when no candidate wins

    def sentence(self) -> str:
        verdict = self.what
        if self.because:
            verdict += f"; {self.lead}{' ' if self.lead == 'most likely' else ': '}{self.because}"
        return verdict + "." + self.corroboration


def _diagnose(
    evidence: Evidence, headline: Finding, incident: Incident | None, findings: list[Finding]
) -> Diagnosis:
    # The card and the verdict open with it: capitalized here, where the run's names are known.
    names = [*evidence.run.metric_names, *map(visible, evidence.run.metric_names)]
    what = sentence_start(_describe_incident(incident) or headline.message.rstrip("."), names)
    verdict = compete(evidence, headline, incident, findings)
    winner = verdict.winner
    cause: Finding | None = None
    lead = "most likely"
    if winner is None and verdict.undetermined_because:
        category, confidence = UNDETERMINED, 0.0
        lead, because = "the cause is undetermined", verdict.undetermined_because
    elif winner is None or (winner.finding is headline and incident is None):
        # The headline finding is the incident and its own explanation (a loss-scale collapse,
        # a resume with no spike yet): saying "see F1: <the same words>" would repeat it.
        cause, category, because = headline, headline.category, ""
        if winner is not None:
            category = winner.category
        confidence = calibrated_confidence(category, headline.confidence)
    else:
        cause = winner.finding
        category = winner.category
        rule_confidence = cause.confidence if cause is not None else headline.confidence
        confidence = calibrated_confidence(category, rule_confidence)
        because = f"{cause_words(category)} (confidence {confidence:.2f}): {winner.support}"
    spike_id = incident.spike.id if incident is not None and incident.spike is not None else None
    corroborating = [
        f
        for f in findings
        if f.source == "checkpoints" and f.spike_id is not None and f.spike_id == spike_id
    ]
    corroboration = ""
    if corroborating:
        first_sentence = corroborating[0].message.split(". ")[0].rstrip(".")
        corroboration = f" Checkpoints agree: {first_sentence}."
    corroboration += _same_event_note(verdict)
    corroboration += _what_if_note(findings, incident)
    return Diagnosis(what, cause, category, confidence, because, corroboration, lead)


def _same_event_note(verdict: Verdict) -> str:
    """The verdict's event as other evidence saw it (the resume the logs show for an optimizer
    reset the checkpoints show); "" when nothing else saw it."""
    winner = verdict.winner
    if winner is None:
        return ""
    for candidate in verdict.candidates:
        other = candidate.finding
        if other is None or other is winner.finding or not corroborates(candidate, winner):
            continue
        if winner.finding is not None and other.source == winner.finding.source:
            continue
        seen = other.message.split(" (")[0].rstrip(".")
        return f" The {other.source} agree: {seen[:1].lower()}{seen[1:]}."
    return ""


def _what_if_note(findings: list[Finding], incident: Incident | None) -> str:
    """The replay experiments that changed the outcome of this incident, in one sentence."""
    if incident is None:
        return ""
    end = incident.end_step if incident.end_step is not None else incident.peak_step
    removed = [
        f
        for f in findings
        if f.category == "intervention_effect"
        and f.evidence.get("spike_removed") is True
        and f.step is not None
        and incident.onset_step <= f.step <= end
    ]
    if not removed:
        return ""
    described = "; ".join(
        f.message.split(": the peak loss")[0].removeprefix("What-if ") for f in removed
    )
    return f" Replay what-ifs that remove the spike: {described}."
