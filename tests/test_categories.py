"""The category registry is the one definition: docs, explainers and emitted findings agree."""

from __future__ import annotations

import re
from pathlib import Path

from tscope.analyzers import EXPLAINERS
from tscope.analyzers.replay import REPLAY_EXPLAINERS
from tscope.model.categories import (
    ALERT_SEVERITIES,
    CATEGORIES,
    ROLES,
    SEVERITIES,
    at_least,
    category,
    ranking_role,
)

ROOT = Path(__file__).resolve().parent.parent


def test_docs_list_every_registered_category() -> None:
    docs = (ROOT / "docs" / "case-schema.md").read_text()
    missing = [entry.id for entry in CATEGORIES if f"`{entry.id}`" not in docs]
    assert missing == []


def test_every_emitted_category_is_registered() -> None:
    emitted = set()
    for path in (ROOT / "analyzers").rglob("*.py"):
        emitted |= set(re.findall(r'category="([a-z_]+)"', path.read_text()))
    assert len(emitted) > 20  # the scan found the explainers' findings
    assert sorted(c for c in emitted if category(c) is None) == []


def test_explainers_declare_registered_categories() -> None:
    explainers = [*EXPLAINERS, *REPLAY_EXPLAINERS]
    declared = [c for explainer in explainers for c in explainer.categories]
    assert sorted(c for c in declared if category(c) is None) == []
    # A category may come from several sources (layer_origin from checkpoints and from per-layer
    # logs; lr_schedule_jump from the logged LR and from the optimizer's param groups): the
    # registry defines it once, whoever emits it.
    for explainer in explainers:
        assert len(explainer.categories) == len(set(explainer.categories)), explainer.name


def test_replay_explainers_declare_what_their_modules_emit() -> None:
    """A replay explainer's categories are the ones its module writes (no category unlisted)."""
    emitted = set()
    for path in (ROOT / "analyzers" / "replay").glob("*.py"):
        emitted |= set(re.findall(r'category="([a-z_]+)"', path.read_text()))
    declared = {c for explainer in REPLAY_EXPLAINERS for c in explainer.categories}
    assert declared == emitted


def test_entries_are_well_formed() -> None:
    ids = [entry.id for entry in CATEGORIES]
    assert len(ids) == len(set(ids))
    for entry in CATEGORIES:
        assert entry.role in ROLES and entry.severity in SEVERITIES
        assert entry.words and entry.docs


def test_severity_order_and_roles() -> None:
    assert at_least("critical", "warning") and at_least("warning", "warning")
    assert not at_least("info", "warning")
    assert set(ALERT_SEVERITIES) == {"critical", "warning"}
    assert ranking_role("lr_schedule_jump") == 0
    assert 0 < ranking_role("loss_divergence") < ranking_role("loss_spike")
    assert ranking_role("loss_plateau") < ranking_role("weight_norm_growth")
