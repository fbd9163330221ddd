"""Order findings so the first is the best explanation of the biggest incident."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tscope.analyzers.categories import CAUSES, STANDALONE, ranking_role
from tscope.analyzers.incidents import Incident
from tscope.analyzers.reach import CAUSE_LOOKBACK_STEPS
from tscope.model import Finding
from tscope.model.categories import evidence_rank, severity_rank

# Causes explain an incident; symptoms describe it (each category's role: tscope/analyzers/categories.py). At
# equal severity a cause linked to the incident ranks above the incident's own description.
CAUSE_CATEGORIES = CAUSES
# Conditions that are their own news, not the description of a spike.
STANDALONE_CATEGORIES = STANDALONE


def rank_findings(findings: list[Finding], incidents: list[Incident]) -> list[Finding]:
    incident_rank: dict[str, int] = {}
    for position, incident in enumerate(incidents):
        if incident.spike is not None:
            incident_rank.setdefault(incident.spike.id, position)

    divergence = next((i for i, inc in enumerate(incidents) if inc.kind == "divergence"), None)
    # Each finding is matched against every incident at once, in numpy: a loop per pair made a
    # log with a spike every 50 steps (10,000 findings, as many incidents) quadratic in Python.
    onsets = np.asarray([incident.onset_step for incident in incidents], dtype=np.int64)
    # An incident that never recovered lasts to the end of the log.
    never = np.iinfo(np.int64).max
    ends = np.asarray(
        [never if i.end_step is None else i.end_step for i in incidents], dtype=np.int64
    )

    def linked_incident(finding: Finding) -> int:
        if finding.category == "loss_divergence" and divergence is not None:
            return divergence
        if finding.spike_id is not None and finding.spike_id in incident_rank:
            return incident_rank[finding.spike_id]
        if finding.step is None or not incidents:
            return len(incidents)
        step = int(finding.step)
        linked = (onsets <= step) & (step <= ends)
        if finding.category in CAUSE_CATEGORIES:
            linked |= (step <= onsets) & (onsets - step <= CAUSE_LOOKBACK_STEPS)
        first = int(np.argmax(linked))
        return first if linked[first] else len(incidents)

    def key(finding: Finding) -> tuple[int, int, int, int, float, int, str]:
        return (
            severity_rank(finding.severity),
            linked_incident(finding),
            ranking_role(finding.category),
            evidence_rank(finding.source),  # observed before inferred (OBSERVING_SOURCES)
            -finding.confidence,
            finding.step if finding.step is not None else -1,
            finding.category,
        )

    ordered = sorted(findings, key=key)
    return [replace(finding, id=f"F{number}") for number, finding in enumerate(ordered, start=1)]
