"""The category registry is the one definition: docs, explainers and emitted findings agree."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tscope.analyzers import EXPLAINERS
from tscope.analyzers.categories import CATEGORIES, SYMPTOMS, category, docs_table, ranking_role
from tscope.analyzers.replay import REPLAY_EXPLAINERS
from tscope.model.categories import (
    ALERT_SEVERITIES,
    ROLES,
    SEVERITIES,
    SOURCES,
    CategoryTable,
    at_least,
)

ROOT = Path(__file__).resolve().parent.parent


def test_docs_table_is_current() -> None:
    """docs/case-schema.md's category table is the one generated from the declarations (run
    `python scripts/update_category_docs.py` after adding or changing a category)."""
    docs = (ROOT / "docs" / "case-schema.md").read_text()
    start, end = "<!-- categories:start -->\n", "<!-- categories:end -->"
    assert start in docs and end in docs
    assert docs.split(start, 1)[1].split(end, 1)[0] == docs_table()
    assert all(f"| `{entry.id}` |" in docs for entry in CATEGORIES)


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
        # An explainer declares only categories it emits.
        defined = {record.id for record in explainer.defines}
        assert defined <= set(explainer.categories), explainer.name


def test_log_and_checkpoint_explainers_declare_what_their_modules_emit() -> None:
    """Every category written in analyzers/explainers/ is listed by a registered explainer (the
    configured-LR rule's lr_too_low went unlisted until this test)."""
    emitted = set()
    for path in (ROOT / "analyzers" / "explainers").glob("*.py"):
        emitted |= set(re.findall(r'category="([a-z_]+)"', path.read_text()))
    declared = {c for explainer in EXPLAINERS for c in explainer.categories}
    assert declared == emitted


def test_a_category_is_declared_once() -> None:
    record = CATEGORIES[0]
    with pytest.raises(ValueError, match="declared twice"):
        CategoryTable((record, record))


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
        assert entry.role in ROLES and entry.severity in SEVERITIES and entry.source in SOURCES
        assert entry.words and entry.docs
        # Symptoms, and only they, have a ranking order, each a different one.
        assert (entry.symptom_order is not None) == (entry.role == "symptom"), entry.id
    orders = [entry.symptom_order for entry in CATEGORIES if entry.symptom_order is not None]
    assert len(orders) == len(set(orders))


def test_severity_order_and_roles() -> None:
    assert at_least("critical", "warning") and at_least("warning", "warning")
    assert not at_least("info", "warning")
    assert set(ALERT_SEVERITIES) == {"critical", "warning"}
    assert ranking_role("lr_schedule_jump") == 0
    assert 0 < ranking_role("loss_divergence") < ranking_role("loss_spike")
    assert ranking_role("loss_plateau") < ranking_role("weight_norm_growth")
    # The descriptions of one incident, the most severe first (the order F1 is chosen by; a new
    # symptom may stand anywhere between them).
    known = (
        "loss_divergence",
        "nan_loss",
        "loss_spike",
        "recurring_loss_spikes",
        "grad_norm_spike",
        "grad_norm_high",
        "eval_divergence",
        "overfitting",
        "loss_plateau",
    )
    assert tuple(c for c in SYMPTOMS if c in known) == known
    assert set(known) <= set(SYMPTOMS)
