"""A training loss that rises for good while the eval loss keeps improving is the data changing,
not the model breaking (tests/data/data_switch/, fixtures/make_data_switch_runs.py: accelerate
loops logging to TensorBoard, an eval loss every 50 steps).

A helper-made healthy accelerate run that switched its training text to harder code at step 270
went 1.56 -> 3.1 and stayed there while its eval loss fell 3.68 -> 2.51: it was a critical
loss_divergence with a setback warning. The same fixture switch (an easy first phase, then the
eval's own distribution) was critical before too. A real incident at the same step (an LR ×20)
makes the eval loss worse, and keeps its alarms.
"""

from __future__ import annotations

from pathlib import Path

import tscope

RUNS = Path(__file__).resolve().parent / "data" / "data_switch"


def test_a_switch_to_harder_data_with_the_eval_improving_is_healthy() -> None:
    case = tscope.analyze(RUNS / "switch_to_docstrings")
    assert case.summary.status == "healthy"
    assert not [f for f in case.findings if f.severity in ("warning", "critical")]
    divergence = [f for f in case.findings if f.category == "loss_divergence"]
    assert divergence and divergence[0].severity == "info"
    assert "eval loss did not get worse" in divergence[0].message
    assert "training data changed there" in case.summary.verdict
    spike = [f for f in case.findings if f.category == "loss_spike" and f.step >= 300]
    assert spike and spike[0].evidence["impact"]["eval_held"] is True


def test_an_lr_jump_that_hurts_the_eval_loss_keeps_its_alarms() -> None:
    case = tscope.analyze(RUNS / "lr_jump_on_docstrings")
    assert case.summary.status == "incident"
    assert case.summary.card is not None
    assert case.summary.card.cause.category == "lr_schedule_jump"
    spikes = [f for f in case.findings if f.category == "loss_spike" and f.severity == "warning"]
    assert spikes and spikes[0].evidence["impact"]["eval_held"] is False


def test_a_switch_away_from_the_eval_data_is_not_called_a_bad_batch() -> None:
    """tests/data/eval_domain_switch/ (fixtures/make_eval_domain_switch_run.py): training moves
    from torch.nn's source to Markdown at step 200, the eval stays on the source. The train loss
    steps up and adapts (its loss_spike finding is info: under 1.5× at a steady LR), the eval
    loss rises and stays up. The verdict read "most likely a bad batch (confidence 0.70)"."""
    case = tscope.analyze(Path(__file__).resolve().parent / "data" / "eval_domain_switch")
    assert [f.category for f in case.findings if f.severity != "info"] == ["eval_divergence"]
    assert "bad batch" not in case.summary.verdict
    assert case.summary.card is None or case.summary.card.cause.category != "bad_batch"


def test_an_eval_taken_after_the_train_loss_came_back_down_witnesses_nothing() -> None:
    """A setback at step 200 mostly recovered by the eval at 250: that eval is below the one at
    150 (training went on in between) but says nothing of the damage while the loss was up."""
    import numpy as np

    from tests.planted_logs import as_run
    from tscope.analyzers.impact import eval_held_through, measure_impact

    steps = np.arange(1, 401)
    loss = 2.5 - 0.001 * steps + 0.01 * np.random.default_rng(0).standard_normal(400)
    loss[199:] += 1.2 * np.exp(-(steps[199:] - 200) / 12.0)  # up at 200, mostly back by 240
    evals = np.full(400, np.nan)
    evals[[149, 249, 349]] = [2.40, 2.33, 2.25]  # steps 150, 250, 350: ever lower
    run = as_run({"loss": loss, "eval_loss": evals})
    assert eval_held_through(run, 200, 300) is None
    assert not measure_impact(run, 200, 300).eval_held
    evals[204] = 2.30  # an eval at step 205, while the loss was still up, no worse than before
    held = as_run({"loss": loss, "eval_loss": evals})
    assert eval_held_through(held, 200, 300) == (2.40, 2.33)
