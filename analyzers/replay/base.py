"""The replay explainer interface: like tscope.analyzers.base.Explainer, on a replay's result."""

from __future__ import annotations

from typing import Protocol

from tscope.analyzers.base import DeclaresCategories
from tscope.model import Finding
from tscope.model.replay import ReplayResult


class ReplayExplainer(DeclaresCategories, Protocol):
    """Turns a replay's result into findings of one category (or a closely related few)."""

    def run(self, result: ReplayResult) -> list[Finding]: ...


def qualified(result: ReplayResult) -> bool:
    """The replay did not reproduce the log: what it shows is about the replayed run, which may
    differ from the one that ran (its findings say so, at lower confidence)."""
    return not result.fidelity.reproduced
