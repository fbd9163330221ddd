"""The order of findings: severity, the incident they belong to, role, then observed before
inferred (OBSERVING_SOURCES), then confidence."""

from __future__ import annotations

from tscope.analyzers.ranking import rank_findings
from tscope.model import Finding


def finding(source: str, confidence: float, category: str = "bad_batch") -> Finding:
    return Finding(
        category=category,
        severity="warning",
        confidence=confidence,
        step=150,
        layer=None,
        message=f"{source} {category}",
        evidence={},
        suggestion="",
        source=source,
    )


def test_a_replays_finding_ranks_above_the_logs_finding_of_the_same_role_and_step():
    logs = finding("logs", 0.99)
    replay = finding("replay", 0.8)
    ranked = rank_findings([logs, replay], [])
    assert [f.source for f in ranked] == ["replay", "logs"]
    assert [f.id for f in ranked] == ["F1", "F2"]


def test_between_inferring_sources_confidence_decides():
    ranked = rank_findings([finding("checkpoints", 0.6), finding("logs", 0.9)], [])
    assert [f.source for f in ranked] == ["logs", "checkpoints"]
