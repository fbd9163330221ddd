"""Issue 11's "early instability blamed on the batch", from a real-producer run.

tests/data/wandb_early_instability/ is a W&B offline log written by the real wandb 0.31 client
(fixtures/make_wandb_early_instability.py): the project's tiny GPT trained with AdamW at a
constant 3e-3 from the first step (no warm-up, no clipping) on ordinary shuffled text. At step 12
the update breaks the model: the loss jumps 3.25 → 5.80 with the gradient norm at 22.6 (0.5–0.8
around it) and falls back the next step. The batch is ordinary, so the verdict is the missing
warm-up, and the bad batch is an alternative with the reason it is less likely.
"""

from __future__ import annotations

from pathlib import Path

import pytest

import tscope
from tscope.model import Case

FIXTURE = Path(__file__).resolve().parent / "data" / "wandb_early_instability"
BREAK_STEP = 12


@pytest.fixture(scope="module")
def case() -> Case:
    return tscope.analyze(FIXTURE)


def test_the_fixture_is_the_issues_pattern(case: Case) -> None:
    """What the run holds (so the verdict below is about this pattern, not another): a constant
    3e-3, and a one-step break at 12 with a gradient norm ~30× its neighbours."""
    by_category = {f.category: f for f in case.findings}
    spike = by_category["loss_spike"]
    assert spike.step == BREAK_STEP
    assert spike.evidence["peak_value"] == pytest.approx(5.80, abs=0.01)
    grad = by_category["grad_norm_spike"]
    assert grad.step == BREAK_STEP
    assert grad.evidence["peak_value"] == pytest.approx(22.6, abs=0.1)
    assert case.summary.status == "incident"


def test_an_early_break_without_warm_up_is_the_update_not_the_batch(case: Case) -> None:
    card = case.summary.card
    assert card is not None
    assert card.cause.category in ("warmup_too_short", "lr_too_high")
    assert card.cause.category != "bad_batch"
    assert card.step == BREAK_STEP


def test_the_bad_batch_is_an_alternative_with_the_reason(case: Case) -> None:
    reasons = [a.reason for a in case.alternatives if a.category == "bad_batch"]
    assert len(reasons) == 1
    reason = reasons[0]
    assert reason.startswith("less likely a bad batch")
    assert "warm-up" in reason
    assert f"tscope replay --around {BREAK_STEP}" in reason  # what would tell them apart
