"""Explainers of `tscope replay` results: pure functions of the replay model (no torch).

findings = replay_findings(result)

The registry is a literal tuple, like tscope.analyzers.EXPLAINERS: add a new replay explainer
module (a class with name, categories and run(result), analyzers/replay/base.py) to
REPLAY_EXPLAINERS here.
"""

from __future__ import annotations

from tscope.analyzers.replay.base import ReplayExplainer
from tscope.analyzers.replay.effects import InterventionEffectExplainer, cause_verdict
from tscope.analyzers.replay.interventions import judge, spike_line, window_peak
from tscope.analyzers.replay.layers import LayerStatisticsExplainer
from tscope.analyzers.replay.mismatch import MismatchExplainer
from tscope.analyzers.replay.samples import BadBatchExplainer
from tscope.model import Finding
from tscope.model.replay import ReplayResult

__all__ = [
    "REPLAY_EXPLAINERS",
    "ReplayExplainer",
    "cause_verdict",
    "judge",
    "replay_findings",
    "spike_line",
    "window_peak",
]

# In this order: the replay's own view ranks mismatch, samples, layers, then the what-ifs.
REPLAY_EXPLAINERS: tuple[ReplayExplainer, ...] = (
    MismatchExplainer(),
    BadBatchExplainer(),
    LayerStatisticsExplainer(),
    InterventionEffectExplainer(),
)


def replay_findings(result: ReplayResult) -> list[Finding]:
    """Every finding the replay supports, most important first within the replay's own view."""
    return [finding for explainer in REPLAY_EXPLAINERS for finding in explainer.run(result)]
