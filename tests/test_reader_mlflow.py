"""MLflow's file store (readers/mlflow_files.py): metric files, parameter files, run folders."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from tscope.errors import UsageError
from tscope.ingest.readers.mlflow_files import MlflowRunReader
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
    assert [s.kind for s in read.sources] == ["mlflow_run"]
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


def test_only_a_run_folder_s_meta_yaml_is_claimed(tmp_path: Path) -> None:
    run = _write_run(tmp_path / "mlruns" / "0" / "run1")
    (tmp_path / "mlruns" / "0" / "meta.yaml").write_text("experiment_id: '0'\nname: Default\n")
    reader = MlflowRunReader()
    assert reader.can_read(run / "meta.yaml")
    assert not reader.can_read(tmp_path / "mlruns" / "0" / "meta.yaml")  # the experiment's
    assert not reader.can_read(run / "metrics" / "lr")
    loose = tmp_path / "other" / "meta.yaml"  # no metrics/ beside it
    loose.parent.mkdir()
    loose.write_text("run_id: x\nartifact_uri: y\n")
    assert not reader.can_read(loose)


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


REAL = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "mlflow"
EXPERIMENT = REAL / "filestore" / "933699634133149499"
HEALTHY = EXPERIMENT / "e0722abb3cfc46d5854435a259a4edbd"
LR_JUMP = EXPERIMENT / "e58cf9b7899d4dd5af85a82799b4ae7d"
TRAINER = REAL / "trainer_filestore" / "951463775067902824" / "98ff62ae534d4b3d963027a5793b8358"


def test_real_healthy_run_written_by_mlflow_is_healthy() -> None:
    case, read = analyze_run(HEALTHY)
    assert read.series(LOSS)[0].tolist() == list(range(1, 301))
    assert case.summary.status == "healthy", case.summary.verdict
    assert not [f for f in case.findings if f.severity in ("warning", "critical")]


def test_real_lr_jump_near_zero_loss_is_dated_at_the_jump() -> None:
    """The MLP's loss sits at 0.002-0.17 before the jump: 1.5x its best is noise there, and the
    divergence was dated at step 190, before the jump at 200. It starts at the blow-up now."""
    case, _ = analyze_run(LR_JUMP)
    card = case.summary.card
    assert card is not None and card.cause.category == "lr_schedule_jump"
    divergence = next(f for f in case.findings if f.category == "loss_divergence")
    assert 200 <= divergence.step <= 202


def test_real_experiment_of_two_runs_is_refused_and_clustered(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="2 separate runs"):
        analyze_run(EXPERIMENT)
    from tscope.cluster_pipeline import cluster

    report = cluster(EXPERIMENT, tmp_path / "cluster", jobs=1)
    statuses = {p.name: p.status for p in report.profiles}
    assert statuses == {
        "e0722abb3cfc46d5854435a259a4edbd": "stable",
        "e58cf9b7899d4dd5af85a82799b4ae7d": "unstable",
    }


def test_real_trainer_run_keeps_the_summary_loss_apart() -> None:
    """MLflowCallback logs `loss` every step and `train_loss` (the run's mean) once: the per-step
    key is the training loss; the summary keeps its own name."""
    case, read = analyze_run(TRAINER)
    steps, _ = read.series(LOSS)
    assert steps.tolist() == list(range(1, 121))
    assert read.series("train_loss")[0].tolist() == [120]
    assert read.config["learning_rate"] == 0.001 and read.config["max_steps"] == 120
    assert case.summary.status == "healthy", case.summary.verdict


def test_real_nan_and_inf_values() -> None:
    run = next((REAL / "filestore" / "145434751608902531").glob("*/meta.yaml")).parent
    _, read = analyze_run(run)
    steps, values = read.series("probe")
    assert steps.tolist() == [0, 1, 2, 3, 4]
    assert values[0] == 1.5 and math.isnan(values[1]) and values[2] == math.inf
    assert values[3] == -math.inf and values[4] == 2.5


def test_review_malformed_binary_and_stepless_metric_files(tmp_path: Path) -> None:
    """A value `.` raised; a binary metric file threw the run away; values logged without a step
    (all at step 0) collapsed to one point."""
    run = _write_run(tmp_path / "mlruns" / "0" / "run1")
    with (run / "metrics" / "lr").open("a") as handle:
        handle.write("1700000999000 . 301\n1700000999001 1.2.3 302\n")
    (run / "metrics" / "zz_binary").write_bytes(b"1 2 3\n\x00\x00garbage\n")
    (run / "metrics" / "tokens").write_text(
        "".join(f"{1_700_000_000_000 + i} {i * 512} 0\n" for i in range(50))
    )
    case, read = analyze_run(run)
    assert read.series(LOSS)[0].size == 300
    assert read.series("tokens")[0].tolist() == list(range(50))
    problems = " ".join(p.problem for p in case.partial)
    assert "metrics/lr: 2 lines" in problems and "metrics/zz_binary" in problems
    assert any(c.kind == "mlflow_unstepped" for c in case.caveats)


def test_review_deleted_runs_are_not_read(tmp_path: Path) -> None:
    experiment = tmp_path / "mlruns" / "0"
    _write_run(experiment / "active")
    deleted = _write_run(experiment / "gone", jump=True)
    (deleted / "meta.yaml").write_text("run_id: gone\nlifecycle_stage: deleted\n")
    _write_run(tmp_path / "mlruns" / ".trash" / "old")
    case, read = analyze_run(experiment)
    assert [s.path for s in read.sources] == ["active/meta.yaml"]
    assert case.summary.status == "healthy"


def test_review_dvclive_names_come_from_inside_the_input(tmp_path: Path) -> None:
    # A `metrics` folder above the input, and a file right in plots/metrics/.
    dvclive = tmp_path / "metrics" / "exp" / "dvclive"
    (dvclive / "plots" / "metrics").mkdir(parents=True)
    rows = ["step\tloss"] + [f"{s}\t{2.5 + 5 * math.exp(-s / 40)}" for s in range(1, 101)]
    (dvclive / "plots" / "metrics" / "loss.tsv").write_text("\n".join(rows) + "\n")
    _, read = analyze_run(dvclive)
    assert read.series(LOSS)[0].size == 100


def test_lines_written_out_of_order_by_async_logging_are_read_in_logging_order(
    tmp_path: Path,
) -> None:
    # The Trainer's MLflowCallback logs with synchronous=False (mlflow >= 2.8): the file store's
    # queue appends lines out of order (steps 10, 40, 20, ...), once read as dozens of resumes.
    run = _write_run(tmp_path / "mlruns" / "0" / "async1", jump=True)
    for name in ("train/loss", "lr"):
        lines = (run / "metrics" / name).read_text().splitlines()
        shuffled = [
            line
            for block in zip(lines[1::3], lines[::3], lines[2::3], strict=True)
            for line in block
        ]
        (run / "metrics" / name).write_text("\n".join(shuffled) + "\n")
    case, read = analyze_run(run)
    assert read.series(LOSS)[0].tolist() == list(range(1, 301))
    assert read.events_of("resume") == []
    card = case.summary.card
    assert card is not None and card.cause.category == "lr_schedule_jump"


def test_a_run_named_by_run_uuid_only_is_read(tmp_path: Path) -> None:
    # MLflow before 0.9 wrote `run_uuid:` and no `run_id:` in a run's meta.yaml.
    run = _write_run(tmp_path / "mlruns" / "0" / "old1", jump=True)
    (run / "meta.yaml").write_text(f"run_uuid: {run.name}\nstatus: 3\n")
    case, read = analyze_run(run)
    assert [s.kind for s in read.sources] == ["mlflow_run"]
    card = case.summary.card
    assert card is not None and card.cause.category == "lr_schedule_jump"
