"""Overfitting in a real `transformers.Trainer` run, and its healthy twin.

tests/data/overfitting_trainer/ (fixtures/make_overfitting_runs.py): a tiny GPT-2 trained for 300
steps with evaluation every 10 steps, logged by the Trainer's TensorBoard callback. `overfit` sees
16 blocks ~150 times: the train loss falls to ~0.1 while the eval loss, best at step 30, climbs
steadily to ~2× its best. That rise also crosses the spike detectors on eval/loss, and it was
headlined "eval/loss spiked ... inspect the batch of step 300" (0.99) above the overfitting
finding: an eval loss rising while the train loss falls is overfitting, and the rise is its
evidence, not a second incident. `healthy` sees 1,700 blocks about once: no warning.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tscope
from tscope.model import Case
from tscope.model.metric_names import EVAL_LOSS

FIXTURES = Path(__file__).resolve().parent / "data" / "overfitting_trainer"


@pytest.fixture(scope="module")
def overfit() -> Case:
    return tscope.analyze(FIXTURES / "overfit")


def test_the_fixture_overfits(overfit: Case) -> None:
    found = [f for f in overfit.findings if f.category == "overfitting"]
    assert len(found) == 1
    evidence = found[0].evidence
    assert evidence["best_eval_step"] == 30
    assert evidence["last_eval_loss"] > 1.8 * evidence["best_eval_loss"]
    assert evidence["train_loss_at_end"] < 0.2 * evidence["train_loss_at_best"]


def test_the_headline_is_overfitting_not_an_eval_spike(overfit: Case) -> None:
    card = overfit.summary.card
    assert card is not None
    assert card.cause.category == "overfitting"
    assert overfit.findings[0].category == "overfitting"
    alerts = [f for f in overfit.findings if f.severity in ("warning", "critical")]
    assert [f.category for f in alerts] == ["overfitting"]


def test_the_eval_rise_is_noted_as_the_overfittings_evidence(overfit: Case) -> None:
    eval_spikes = [
        f
        for f in overfit.findings
        if f.category == "loss_spike"
        and any(s.id == f.spike_id and s.metric == EVAL_LOSS for s in overfit.spikes)
    ]
    assert eval_spikes, "the eval loss's rise is still reported"
    for finding in eval_spikes:
        assert finding.severity == "info"
        assert "overfitting finding" in finding.message
        assert "inspect the batch" not in finding.suggestion
        # Its impact is measured on the eval loss, not on the train loss.
        assert finding.evidence["impact"]["peak"] == pytest.approx(
            finding.evidence["peak_value"], rel=1e-6
        )


def test_the_healthy_twin_has_no_warning() -> None:
    case = tscope.analyze(FIXTURES / "healthy")
    assert case.summary.status == "healthy"
    assert not [f for f in case.findings if f.severity in ("warning", "critical")]
