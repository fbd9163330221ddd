"""Order findings so the first is the best explanation of the biggest incident."""

from __future__ import annotations

from dataclasses import replace

from tscope.analyzers.incidents import Incident

from tscope.model import Finding

_SEVERITY_ORDER = {"critical": 0, "warning": 1, "info": 2}
# Causes explain an incident; symptoms describe it. At equal severity a cause linked to the
# incident ranks above the incident's own description.
CAUSE_CATEGORIES = (
    "bad_batch",  # a replay named the samples (tscope replay)
    "nonfinite_origin",
    "lr_schedule_jump",
    "resume_discontinuity",
    "lr_too_high",
    "loss_scale_collapse",
    "warmup_too_short",
)
# Conditions that are their own news, not the description of a spike: when one heads the
# findings the first screen describes it rather than an unrelated incident nearby.
STANDALONE_CATEGORIES = ("overfitting", "loss_plateau", "grad_norm_high", "lr_too_low")
# A cause is credited to an incident when it lies at most this many steps before the onset (the
# story gives the exact lead; an LR jump or a bad resume acts within a few optimizer steps).
CAUSE_LOOKBACK_STEPS = 100
# Within the symptoms of one incident, this order: the most severe description first.
_SYMPTOM_ORDER = (
    "loss_divergence",
    "nan_loss",
    "loss_spike",
    "grad_norm_spike",
    "grad_norm_high",
    "eval_divergence",
    "overfitting",
    "loss_plateau",
)


def rank_findings(findings: list[Finding], incidents: list[Incident]) -> list[Finding]:
    incident_rank: dict[str, int] = {}
    for position, incident in enumerate(incidents):
        if incident.spike is not None:
            incident_rank.setdefault(incident.spike.id, position)

    divergence = next((i for i, inc in enumerate(incidents) if inc.kind == "divergence"), None)

    def linked_incident(finding: Finding) -> int:
        if finding.category == "loss_divergence" and divergence is not None:
            return divergence
        if finding.spike_id is not None and finding.spike_id in incident_rank:
            return incident_rank[finding.spike_id]
        if finding.step is None:
            return len(incidents)
        for position, incident in enumerate(incidents):
            # An incident that never recovered lasts to the end of the log.
            end = incident.end_step if incident.end_step is not None else finding.step
            if incident.onset_step <= finding.step <= end or (
                finding.category in CAUSE_CATEGORIES
                and finding.step <= incident.onset_step
                and incident.onset_step - finding.step <= CAUSE_LOOKBACK_STEPS
            ):
                return position
        return len(incidents)

    def key(finding: Finding) -> tuple[int, int, int, float, int, str]:
        if finding.category in CAUSE_CATEGORIES:
            role = 0
        elif finding.category in _SYMPTOM_ORDER:
            role = 1 + _SYMPTOM_ORDER.index(finding.category)
        else:
            role = 1 + len(_SYMPTOM_ORDER)
        return (
            _SEVERITY_ORDER[finding.severity],
            linked_incident(finding),
            role,
            -finding.confidence,
            finding.step if finding.step is not None else -1,
            finding.category,
        )

    ordered = sorted(findings, key=key)
    return [replace(finding, id=f"F{number}") for number, finding in enumerate(ordered, start=1)]
