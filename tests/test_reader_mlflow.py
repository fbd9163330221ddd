"""MLflow's file store (readers/mlflow_files.py): metric files, parameter files, run folders."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tscope.errors import UsageError
from tscope.ingest.readers.mlflow_files import MlflowMetricReader, MlflowParamsReader
from tscope.model.metric_names import LEARNING_RATE, LOSS
from tscope.pipeline import analyze_run


def _write_run(run: Path, jump: bool = False, nan_from: int | None = None) -> Path:
    """A run folder the way FileStore lays one out: meta.yaml, metrics/<key> (`/` in a key a
    sub-folder) of `<timestamp ms> <value> <step>` lines, params/<key>."""
    (run / "metrics" / "train").mkdir(parents=True)
    (run / "params").mkdir()
    (run / "tags").mkdir()
    (run / "meta.yaml").write_text(f"run_id: {run.name}\nstatus: 3\n")
    losses, rates = [], []
    for step in range(1, 301):
        rate = 3e-4 * min(step / 30, 1.0) * (20 if jump and step >= 200 else 1)
        loss = 2.5 + 5 * math.exp(-step / 40) + 0.01 * math.sin(step)
        if jump and step >= 203:
            loss += (step - 202) * 0.8
        if nan_from is not None and step >= nan_from:
            loss = math.nan
        stamp = 1_700_000_000_000 + 1000 * step
        losses.append(f"{stamp} {loss} {step}")
        rates.append(f"{stamp} {rate} {step}")
    (run / "metrics" / "train" / "loss").write_text("\n".join(losses) + "\n")
    (run / "metrics" / "lr").write_text("\n".join(rates) + "\n")
    (run / "params" / "learning_rate").write_text("0.0003")
    (run / "params" / "model").write_text("tiny-gpt")
    (run / "tags" / "mlflow.runName").write_text("run-a")
    return run


def test_a_run_folder_is_read_with_its_series_and_params(tmp_path: Path) -> None:
    run = _write_run(tmp_path / "mlruns" / "0" / "0a1b2c")
    case, read = analyze_run(run)
    assert {s.kind for s in read.sources} == {"mlflow_metrics", "mlflow_params"}
    steps, values = read.series(LOSS)
    assert steps.tolist() == list(range(1, 301)) and values[0] == pytest.approx(
        2.5 + 5 * math.exp(-1 / 40) + 0.01 * math.sin(1)
    )
    assert read.series(LEARNING_RATE)[1][-1] == pytest.approx(3e-4)
    assert read.config["learning_rate"] == 0.0003 and read.config["model"] == "tiny-gpt"
    assert case.summary.status == "healthy"


def test_a_planted_lr_jump_is_the_headline(tmp_path: Path) -> None:
    case, _ = analyze_run(_write_run(tmp_path / "mlruns" / "0" / "run1", jump=True))
    card = case.summary.card
    assert card is not None and card.cause.category == "lr_schedule_jump"


def test_nan_values_are_non_finite_points(tmp_path: Path) -> None:
    case, read = analyze_run(_write_run(tmp_path / "mlruns" / "0" / "run1", nan_from=250))
    assert math.isnan(read.series(LOSS)[1][-1])
    assert any(f.category == "nan_loss" and f.step == 250 for f in case.findings)


def test_an_experiment_folder_of_two_runs_is_not_merged(tmp_path: Path) -> None:
    experiment = tmp_path / "mlruns" / "0"
    _write_run(experiment / "run1")
    _write_run(experiment / "run2", jump=True)
    (experiment / "meta.yaml").write_text("name: Default\n")
    with pytest.raises(UsageError, match="2 separate runs"):
        analyze_run(experiment)


def test_files_outside_a_run_folder_are_not_claimed(tmp_path: Path) -> None:
    loose = tmp_path / "metrics" / "loss"  # no meta.yaml above metrics/
    loose.parent.mkdir()
    loose.write_text("1700000000000 2.5 1\n")
    assert not MlflowMetricReader().can_read(loose)
    run = _write_run(tmp_path / "run")
    (run / "metrics" / "notes").write_text("not a metric\n")
    assert not MlflowMetricReader().can_read(run / "metrics" / "notes")
    assert MlflowParamsReader().can_read(run / "params" / "model")
    assert not MlflowParamsReader().can_read(run / "tags" / "mlflow.runName")


def test_dvclive_per_metric_files_are_named_by_their_folders(tmp_path: Path) -> None:
    """DVCLive's plots/metrics/<key>.tsv: `train/loss.tsv` and `eval/loss.tsv` both hold a
    `loss` column; read as one `loss` they made a fake resume (steps back from 300 to 50)."""
    from tscope.model.metric_names import EVAL_LOSS

    metrics = tmp_path / "dvclive" / "plots" / "metrics"
    (metrics / "train").mkdir(parents=True)
    (metrics / "eval").mkdir()
    train = ["timestamp\tstep\tloss"] + [
        f"{1_700_000_000_000 + s}\t{s}\t{2.5 + 5 * math.exp(-s / 40)}" for s in range(1, 301)
    ]
    evals = ["timestamp\tstep\tloss"] + [
        f"{1_700_000_000_000 + s}\t{s}\t{2.7 + 5 * math.exp(-s / 40)}" for s in range(50, 301, 50)
    ]
    (metrics / "train" / "loss.tsv").write_text("\n".join(train) + "\n")
    (metrics / "eval" / "loss.tsv").write_text("\n".join(evals) + "\n")
    case, read = analyze_run(tmp_path / "dvclive")
    assert read.series(LOSS)[0].size == 300
    assert read.series(EVAL_LOSS)[0].tolist() == [50, 100, 150, 200, 250, 300]
    assert case.summary.status == "healthy"
    assert not [e for e in read.events if e.kind == "resume"]
