"""The analyzer interface: pure functions of the model. No I/O, no printing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from tscope.model import ChangePoint, Finding, Run, Spike
from tscope.model.checkpoint import CheckpointEvidence


@dataclass(frozen=True)
class Evidence:
    """What explainers see: the normalized run and what the detectors found in it."""

    run: Run
    spikes: list[Spike] = field(default_factory=list)
    change_points: list[ChangePoint] = field(default_factory=list)
    checkpoints: CheckpointEvidence | None = None  # None: logs only

    def spikes_on(self, metric: str) -> list[Spike]:
        return [spike for spike in self.spikes if spike.metric == metric]


class Explainer(Protocol):
    """Turns evidence into findings of one category (or a closely related few)."""

    name: str
    # The finding categories it emits, each registered in tscope/model/categories.py.
    categories: tuple[str, ...]

    def run(self, evidence: Evidence) -> list[Finding]: ...
