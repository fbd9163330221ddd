"""The analyzer interface: pure functions of the model. No I/O, no printing."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from tscope.model import ChangePoint, Finding, Run, Spike
from tscope.model.categories import Category
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


class DeclaresCategories(Protocol):
    """What every explainer (of logs and checkpoints, or of a replay) says of its findings."""

    name: str
    # The ids of the finding categories it emits (tests/test_categories.py checks the list).
    categories: tuple[str, ...]

    @property
    def defines(self) -> tuple[Category, ...]:
        """The records of the categories it introduces (tscope.analyzers.categories collects
        them); a category it shares with another explainer is declared by one of them only."""
        ...


class Explainer(DeclaresCategories, Protocol):
    """Turns evidence into findings of one category (or a closely related few)."""

    def run(self, evidence: Evidence) -> list[Finding]: ...
