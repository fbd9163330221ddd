"""Explainers of `tscope replay` results: pure functions of the replay model (no torch).

findings = replay_findings(result, outcomes)
"""

from __future__ import annotations

from tscope.analyzers.replay.effects import cause_verdict, effect_findings
from tscope.analyzers.replay.interventions import judge, spike_line, window_peak
from tscope.analyzers.replay.layers import layer_findings
from tscope.analyzers.replay.mismatch import mismatch_findings
from tscope.analyzers.replay.samples import bad_batch_findings
from tscope.model import Finding
from tscope.model.replay import ReplayResult

__all__ = [
    "cause_verdict",
    "judge",
    "replay_findings",
    "spike_line",
    "window_peak",
]


def replay_findings(result: ReplayResult) -> list[Finding]:
    """Every finding the replay supports, most important first within the replay's own view."""
    qualified = not result.fidelity.reproduced
    findings = mismatch_findings(result)
    findings += bad_batch_findings(result, qualified)
    findings += layer_findings(result, qualified)
    findings += effect_findings(result.interventions, qualified)
    return findings
