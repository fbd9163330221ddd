"""Issue 11's log-side bullets, reproduced on real producers' files.

The LR ×20 run is the nanoGPT-style plain-torch loop of `tscope demo` (a real tiny GPT trained
here, 200 steps), its metrics written by torch's SummaryWriter under the PyTorch TensorBoard
tutorial's own tags (`Loss/train`, `Loss/val`, `GradNorm`, `LearningRate`).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tscope.cli import app
from tscope.demo.run_folder import METRICS_NAME
from tscope.demo.train import DemoRun, make_demo_run
from tscope.ingest.logs.names import canonical_metric
from tscope.model.metric_names import EVAL_LOSS, GRAD_NORM, LEARNING_RATE, LOSS
from tscope.pipeline import analyze

TUTORIAL_TAGS = {
    "train/loss": "Loss/train",
    "eval/loss": "Loss/val",
    "train/grad_norm": "GradNorm",
    "train/learning_rate": "LearningRate",
}


@pytest.fixture(scope="module")
def demo(tmp_path_factory: pytest.TempPathFactory) -> DemoRun:
    return make_demo_run(tmp_path_factory.mktemp("lr_jump") / "run", steps=200)


def _summary_writer_run(
    directory: Path, rows: list[dict[str, float]], tags: dict[str, str]
) -> Path:
    from torch.utils.tensorboard import SummaryWriter

    writer = SummaryWriter(log_dir=str(directory))
    for row in rows:
        for name, tag in tags.items():
            if name in row:
                writer.add_scalar(tag, row[name], int(row["step"]))
    writer.close()
    return directory


@pytest.mark.parametrize(
    ("name", "canonical"),
    [
        ("Loss/train", LOSS),
        ("loss", LOSS),
        ("train_loss", LOSS),
        ("lm loss", LOSS),
        ("Train/Loss", LOSS),
        ("Loss/val", EVAL_LOSS),
        ("lr", LEARNING_RATE),
        ("LearningRate", LEARNING_RATE),
        ("learning-rate", LEARNING_RATE),
        ("grad_norm", GRAD_NORM),
        ("GradNorm", GRAD_NORM),
        ("gnorm", GRAD_NORM),
        ("lr-AdamW", LEARNING_RATE),  # Lightning's LearningRateMonitor, one parameter group
        ("lr-AdamW/pg1", LEARNING_RATE),  # ... and the first of several
    ],
)
def test_common_naming_schemes_are_recognized(name: str, canonical: str) -> None:
    assert canonical_metric(name) == canonical


def test_unrelated_names_keep_their_own_name() -> None:
    assert canonical_metric("Accuracy/train") == "Accuracy/train"
    assert canonical_metric("tokens_per_second") == "tokens_per_second"
    assert canonical_metric("lr-AdamW/pg2") == "lr-AdamW/pg2"
    assert canonical_metric("lr-AdamW-momentum") == "lr-AdamW-momentum"


def test_tutorial_tags_lr_jump_is_headlined_and_fails_the_gate(
    demo: DemoRun, tmp_path: Path
) -> None:
    rows = [json.loads(line) for line in (demo.run_dir / METRICS_NAME).read_text().splitlines()]
    run_dir = _summary_writer_run(tmp_path / "tb", rows, TUTORIAL_TAGS)
    case = analyze(run_dir)
    assert set(TUTORIAL_TAGS) <= set(case.metrics)
    assert case.summary.status == "incident"
    headline = case.findings[0]
    assert headline.category == "lr_schedule_jump"
    assert abs(int(headline.step or -1) - demo.planted_step) <= 1
    result = CliRunner().invoke(
        app, ["analyze", str(run_dir), "--out", str(tmp_path / "case"), "--fail-on", "warning"]
    )
    assert result.exit_code == 1, result.output


def test_no_series_identified_as_the_loss_names_what_was_found(tmp_path: Path) -> None:
    rows = [{"step": s, "acc": 0.5 + s / 400, "tput": 1000.0 + s} for s in range(1, 101)]
    run_dir = _summary_writer_run(
        tmp_path / "tb", rows, {"acc": "Accuracy/train", "tput": "Throughput"}
    )
    summary = analyze(run_dir).summary
    assert summary.status == "insufficient_data"
    assert "Accuracy/train" in summary.verdict and "Throughput" in summary.verdict
    assert "which one is the loss" in summary.verdict


@pytest.mark.parametrize(
    "losses", [[2.78, 3.9, 5.1, 8.72, 8.5, 8.1, 7.9, 7.8, 7.7, 7.65], [2.78]], ids=["10", "1"]
)
def test_thin_logs_are_insufficient_data_never_healthy(tmp_path: Path, losses: list[float]) -> None:
    rows = [{"step": i + 1, "train/loss": v} for i, v in enumerate(losses)]
    run_dir = _summary_writer_run(tmp_path / "tb", rows, {"train/loss": "Loss/train"})
    summary = analyze(run_dir).summary
    assert summary.status == "insufficient_data"
    assert f"only {len(losses)} finite point" in summary.verdict


REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
def test_routine_bumps_of_a_real_spiky_run_are_one_finding() -> None:
    """Baize's batch-2 LoRA run (a real Trainer log) bumps all the time: one info finding."""
    case = analyze(REALDATA / "hf_trainer_state" / "baize_tcm_lora__trainer_state.json")
    recurring = [f for f in case.findings if f.category == "recurring_loss_spikes"]
    assert len(recurring) == 1 and recurring[0].severity == "info"
    evidence = recurring[0].evidence
    assert evidence["count"] >= 3 and evidence["median_spacing_steps"] > 0
    routine = set(evidence["spike_ids"])
    assert not [f for f in case.findings if f.category == "loss_spike" and f.spike_id in routine]
    assert case.summary.status == "healthy"


def test_large_recurring_spikes_are_one_warning(tmp_path: Path) -> None:
    from tests.planted_logs import healthy_series
    from tests.user_logs import write_log

    series = healthy_series(steps=2000, seed=3)
    loss = series["loss"].copy()
    every = 100
    loss[every - 1 :: every] *= 3.5  # a one-step ×3.5 bump every 100 steps
    series["loss"] = loss
    case = analyze(write_log(tmp_path, "csv", series))
    recurring = [f for f in case.findings if f.category == "recurring_loss_spikes"]
    assert len(recurring) == 1 and recurring[0].severity == "warning"
    assert recurring[0].evidence["median_spacing_steps"] == pytest.approx(every, abs=1)
    assert recurring[0].evidence["median_peak_ratio"] == pytest.approx(3.5, rel=0.15)
    assert len([f for f in case.findings if f.category == "loss_spike"]) < 5


def _bumped(series: dict, at: int, rise_points: int, factor: float) -> dict:
    """The loss rises linearly over `rise_points` points to ×factor at `at`, then drops back."""
    loss = series["loss"].copy()
    for offset in range(rise_points):
        loss[at - 1 - offset] *= 1 + (factor - 1) * (rise_points - offset) / rise_points
    return {**series, "loss": loss}


def test_a_slow_rise_is_not_called_a_bad_batch(tmp_path: Path) -> None:
    from tests.planted_logs import healthy_series
    from tests.user_logs import write_log

    series = _bumped(healthy_series(steps=400, seed=2), at=250, rise_points=20, factor=2.0)
    case = analyze(write_log(tmp_path, "csv", series))
    card = case.summary.card
    assert card is not None
    assert card.cause.category != "bad_batch"
    assert "bad batch" not in case.summary.verdict.split(";")[1].split(":")[0]
    if card.cause.category == "undetermined":
        assert "rose over" in case.summary.verdict


def test_with_no_lr_logged_a_one_step_break_is_undetermined(tmp_path: Path) -> None:
    from tests.planted_logs import healthy_series
    from tests.user_logs import write_log

    series = healthy_series(steps=400, seed=4)
    del series["lr"]
    series = _bumped(series, at=250, rise_points=1, factor=1.8)
    case = analyze(write_log(tmp_path, "csv", series))
    assert case.summary.card.cause.category == "undetermined"
    assert "log the LR" in case.summary.verdict
    assert "tscope replay --around 250" in case.summary.verdict
    # The card names the cause once: "undetermined" is both its words and its id.
    from tscope.render import render_case

    written = {path.suffix: path for path in render_case(case, tmp_path / "case", ("md", "html"))}
    card_line = next(
        line for line in written[".md"].read_text().splitlines() if "Most likely cause" in line
    )
    assert card_line.count("undetermined") == 1
    assert 'small-id">undetermined<' not in written[".html"].read_text()


def test_weights_lost_at_a_resume_is_critical_and_tied_to_the_resume(tmp_path: Path) -> None:
    """A JSONL log whose steps go back (a resume, as the nanoGPT loop re-logs them) and whose loss
    returns to the run's first level: the resumed model was a fresh one."""
    import numpy as np

    from tests.synthetic import loss_curve

    first = loss_curve(120, 5)  # from its untrained level down
    rows = [{"step": s + 1, "loss": float(v), "lr": 1e-3} for s, v in enumerate(first)]
    # Resumed at 80 with a fresh model: the same curve again, from the untrained level.
    rows += [{"step": 80 + s, "loss": float(v), "lr": 1e-3} for s, v in enumerate(first)]
    path = tmp_path / "metrics.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    case = analyze(path)
    resume = [f for f in case.findings if f.category == "resume_discontinuity"]
    assert resume and resume[0].severity == "critical" and resume[0].step == 80
    assert resume[0].evidence["weights_lost"] is True
    assert case.findings[0].category == "resume_discontinuity"
    assert case.summary.card.cause.category == "resume_discontinuity"
    assert np.isclose(resume[0].evidence["untrained_level"], first[0], rtol=1e-6)
