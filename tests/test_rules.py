"""The rules from issue 13: planted causes where each must fire, healthy controls where none may."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tscope
from tests import planted_logs as planted
from tests.synthetic import loss_curve, make_run, stable_run, warmup_cosine
from tests.user_logs import LOG_KINDS, write_log
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE, LOSS
from tscope.pipeline import build_case

ALERTS = ("critical", "warning")


def categories(case, severities=ALERTS):
    return [f.category for f in case.findings if f.severity in severities]


# --- too few points to judge ---------------------------------------------------------------------


def test_a_handful_of_loss_points_is_insufficient_data_not_healthy():
    run = make_run({LOSS: loss_curve(8, 0), LEARNING_RATE: warmup_cosine(8)})
    summary = build_case(run, []).summary
    assert summary.status == "insufficient_data"
    assert "only 8 finite points of train/loss" in summary.verdict
    assert summary.missing and summary.next_steps


def test_no_loss_series_is_insufficient_data():
    run = make_run({LEARNING_RATE: warmup_cosine(100)})
    summary = build_case(run, []).summary
    assert summary.status == "insufficient_data"
    # It says which series it found and asks which one is the loss (issue 11).
    assert "no series could be identified as the training loss" in summary.verdict
    assert "series found: train/learning_rate" in summary.verdict


def test_enough_points_are_judged_healthy():
    assert build_case(stable_run(steps=40, seed=1), []).summary.status == "healthy"


def test_a_short_run_that_blew_up_is_still_an_incident():
    loss = loss_curve(10, 0)
    loss[-2:] = np.nan
    summary = build_case(make_run({LOSS: loss, GRAD_NORM: np.ones(10)}), []).summary
    assert summary.status == "incident"


# --- grad_norm_high --------------------------------------------------------------------------------


def analyzed(tmp_path, kind, series):
    return tscope.analyze(write_log(tmp_path / kind, kind, series))


@pytest.mark.parametrize("kind", LOG_KINDS)
def test_grad_norm_that_climbs_x8_and_stays_is_high(tmp_path, kind):
    case = analyzed(tmp_path, kind, planted.grad_norm_growth(seed=3, at=200, factor=8.0))
    found = [f for f in case.findings if f.category == "grad_norm_high"]
    assert [f.severity for f in found] == ["warning"]
    assert 200 <= found[0].step <= 260  # the climb starts at 200 and takes 40 steps
    assert found[0].evidence["reference"] == "early"


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("control", ["healthy", "late drift ×2", "grad norm ×3 from step 200"])
def test_grad_norm_within_healthy_drift_is_not_high(seed, control):
    builder = dict(planted.CONTROLS["grad_norm_high"])[control]
    assert "grad_norm_high" not in categories(build_case(builder(seed), []))


def test_grad_norm_far_above_the_clip_from_the_start_is_high():
    series = planted.healthy_series(seed=2)
    series["grad_norm"] = series["grad_norm"] * 10.0  # ~8 under a 1.0 clip at every step
    run = planted.as_run(series)
    run.config["max_grad_norm"] = 1.0
    found = [f for f in build_case(run, []).findings if f.category == "grad_norm_high"]
    assert [f.evidence["reference"] for f in found] == ["clip"]


def test_grad_norm_a_little_above_the_clip_is_normal():
    series = planted.healthy_series(seed=2)
    series["grad_norm"] = series["grad_norm"] * 3.0  # ~2.4 under a 1.0 clip: a usual fine-tune
    run = planted.as_run(series)
    run.config["max_grad_norm"] = 1.0
    assert "grad_norm_high" not in categories(build_case(run, []))


# --- loss_plateau ----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", LOG_KINDS)
def test_a_loss_that_never_moves_at_lr_1e9_is_a_plateau(tmp_path, kind):
    case = analyzed(tmp_path, kind, planted.lr_far_too_low(seed=5))
    found = [f for f in case.findings if f.category == "loss_plateau"]
    assert [f.severity for f in found] == ["warning"]
    assert found[0].step == 1 and "learning rate is far too low" in found[0].message


def test_a_frozen_model_plateau_names_gradients_not_flowing():
    case = build_case(planted.as_run(planted.frozen_model(seed=1)), [])
    found = [f for f in case.findings if f.category == "loss_plateau"]
    assert found and "gradients are not flowing" in found[0].message


def test_a_run_stuck_for_its_first_60_percent_is_a_plateau_that_ends():
    case = build_case(planted.as_run(planted.late_start(seed=2)), [])
    found = [f for f in case.findings if f.category == "loss_plateau"]
    assert found and 200 <= found[0].evidence["flat_until_step"] <= 245


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("control", ["healthy", "converged fine-tune", "slow pre-training (−6%)"])
def test_converged_or_slowly_learning_runs_are_not_plateaus(seed, control):
    builder = dict(planted.CONTROLS["loss_plateau"])[control]
    assert "loss_plateau" not in categories(
        build_case(
            builder(seed),
            [],
        ),
        ("critical", "warning", "info"),
    )


def test_a_flat_log_that_starts_mid_run_is_only_context():
    """A resumed segment (steps 5001–5400) of a run that had converged before it."""
    series = planted.lr_far_too_low(seed=3)
    series["lr"] = np.full(400, 3e-4)
    run = make_run({LOSS: series["loss"], LEARNING_RATE: series["lr"]}, first_step=5001)
    found = [f for f in build_case(run, []).findings if f.category == "loss_plateau"]
    assert [f.severity for f in found] == ["info"]


# --- overfitting -----------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", LOG_KINDS)
def test_eval_rising_while_train_falls_is_overfitting_from_the_best_eval(tmp_path, kind):
    case = analyzed(tmp_path, kind, planted.overfit(seed=4, at=200, rise=0.10))
    found = [f for f in case.findings if f.category == "overfitting"]
    assert [f.severity for f in found] == ["warning"]
    assert 175 <= found[0].step <= 225  # evals every 25 steps; the best is the one nearest 200
    assert found[0].evidence["gap_at_end"] > found[0].evidence["gap_at_best"]
    assert "eval_divergence" not in categories(case)  # one finding for one cause
    assert case.summary.card.cause.category == "overfitting"


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("control", ["healthy, eval converged", "eval +1.5% after step 300"])
def test_a_converged_eval_loss_is_not_overfitting(seed, control):
    builder = dict(planted.CONTROLS["overfitting"])[control]
    assert "overfitting" not in categories(build_case(builder(seed), []))


def _with_selection_metric(path, accuracy_at):  # type: ignore[no-untyped-def]
    """The trainer_state.json at `path` with an eval_accuracy row at every eval and the Trainer's
    best_metric set to its best (metric_for_best_model="accuracy", greater is better)."""
    import json

    state = json.loads(path.read_text())
    evals = [row for row in state["log_history"] if "eval_loss" in row]
    accuracies = [accuracy_at(row["step"]) for row in evals]
    for row, accuracy in zip(evals, accuracies, strict=True):
        row["eval_accuracy"] = accuracy
    state["best_metric"] = max(accuracies)
    path.write_text(json.dumps(state, indent=2, sort_keys=True))
    return path


def test_eval_loss_rise_with_the_selection_metric_still_improving_is_a_note(tmp_path):
    path = write_log(tmp_path, "trainer_state", planted.overfit(seed=4, at=200, rise=0.10))
    case = tscope.analyze(_with_selection_metric(path, lambda step: 0.5 + step / 1000))
    found = [f for f in case.findings if f.category == "overfitting"]
    assert [f.severity for f in found] == ["info"]
    assert found[0].evidence["selection_metric"]["name"] == "eval_accuracy"
    assert found[0].evidence["selection_metric"]["got_worse"] is False
    assert "did not get worse" in found[0].message


def test_eval_loss_rise_with_the_selection_metric_falling_stays_a_warning(tmp_path):
    path = write_log(tmp_path, "trainer_state", planted.overfit(seed=4, at=200, rise=0.10))
    # Accuracy best at the eval-loss best (step 200), 10% lower by the end.
    case = tscope.analyze(
        _with_selection_metric(path, lambda step: 0.8 - 0.08 * max(step - 200, 0) / 200)
    )
    found = [f for f in case.findings if f.category == "overfitting"]
    assert [f.severity for f in found] == ["warning"]
    assert found[0].evidence["selection_metric"]["got_worse"] is True


REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
def test_whisper_eval_loss_rise_with_wer_improving_is_no_warning():
    """Real Trainer state of whisper-large-v2-ja: eval/loss 0.321 → 0.420 while eval_wer, the
    metric its best_model_checkpoint was chosen by, improved 0.789 → 0.743 (best at 3000)."""
    case = tscope.analyze(REALDATA / "hf_trainer_state" / "whisper_large_v2_ja__trainer_state.json")
    found = [f for f in case.findings if f.category == "overfitting"]
    assert [f.severity for f in found] == ["info"]
    selection = found[0].evidence["selection_metric"]
    assert selection["name"] == "eval_wer" and selection["lower_is_better"] is True
    assert selection["best_step"] == 3000
    assert not categories(case)
    assert case.summary.status == "healthy"


def test_eval_rising_with_the_train_loss_is_divergence_not_overfitting():
    series = planted.overfit(seed=1, rise=0.25)
    series["loss"] = series["loss"][::-1].copy()  # the train loss rises too
    case = build_case(planted.as_run(series), [])
    assert "overfitting" not in categories(case) and "eval_divergence" in categories(case)
