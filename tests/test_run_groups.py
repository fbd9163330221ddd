"""A folder holding several unrelated runs is never merged into one timeline, nor cut to one run.

The incidents: `tscope analyze megatron_logs/` joined the 13B, 104B and 176B excerpts into one
run and reported a "resume at step 6502" and a critical loss-scale collapse across different
models; `hf_trainer_state/` read one of its three unrelated trainer_state.json files and dropped
the other two without a word; `modded_nanogpt/runs` (10 runs) was merged too. What must stay one
run: a Trainer run with its checkpoint copies of trainer_state.json and its TensorBoard events, a
resumed run's several log files, a run's logs of different formats side by side.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tscope
from tscope.cli import app
from tscope.errors import SeveralRuns
from tscope.ingest.discover import discover
from tscope.ingest.run_groups import run_groups

ROOT = Path(__file__).resolve().parents[1]
REALDATA = ROOT.parent / "shared" / "realdata"
runner = CliRunner()


def groups_in(folder: Path) -> list[str]:
    return [group.label for group in run_groups(discover(folder).reads)]


def metrics_csv(path: Path, first: int = 1, last: int = 60, start_loss: float = 4.0) -> Path:
    rows = [f"{step},{start_loss - 0.01 * step:.4f}" for step in range(first, last + 1)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("step,loss\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def nanogpt_log(path: Path, first: int, last: int) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [f"iter {i}: loss {4.0 - 0.01 * i:.4f}, time 10.00ms\n" for i in range(first, last)]
    path.write_text("".join(lines), encoding="utf-8")
    return path


@pytest.mark.parametrize(
    ("folder", "runs", "named"),
    [
        ("megatron_logs", 4, "tr1-13B-base__chronicles.log"),
        ("hf_trainer_state", 3, "whisper_large_v2_ja__trainer_state.json"),
        ("modded_nanogpt/runs", 10, "2024-10-09_SOAP"),
        ("pythia_wandb_export", 2, "14m-seed5.csv"),
    ],
)
def test_a_folder_of_unrelated_real_runs_is_refused_naming_them(folder, runs, named, tmp_path):
    path = REALDATA / folder
    if not path.is_dir():
        pytest.skip(f"{path} is absent (public training logs, see shared/realdata/README.md)")
    result = runner.invoke(app, ["analyze", str(path), "--no-weights", "-o", str(tmp_path / "o")])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and f"holds {runs} separate runs" in lines[0]
    assert named in lines[0] and f"tscope cluster {path}" in lines[0]
    assert not (tmp_path / "o").exists()


def test_the_176b_prequel_and_chronicles_are_one_run_and_pythia_segments_too():
    if not REALDATA.is_dir():
        pytest.skip("../shared/realdata is absent")
    megatron = groups_in(REALDATA / "megatron_logs")
    assert "tr11-176B-ml__chronicles-prequel.log (+1 more file)" in megatron
    pythia = groups_in(REALDATA / "pythia_wandb_export")
    assert pythia == ["14m-seed5.csv", "70m-seed3_0ydn3v9s.csv (+2 more files)"]


@pytest.mark.parametrize(
    "run", sorted(p.name for p in (ROOT / "fixtures/data/trainer").iterdir() if p.is_dir())
)
def test_a_trainer_run_with_checkpoint_copies_and_tensorboard_is_one_run(run):
    assert len(groups_in(ROOT / "fixtures/data/trainer" / run)) == 1


def test_two_csvs_of_different_runs_are_refused(tmp_path):
    metrics_csv(tmp_path / "runs" / "baseline.csv")
    metrics_csv(tmp_path / "runs" / "higher_lr.csv", start_loss=5.0)
    with pytest.raises(SeveralRuns, match="holds 2 separate runs"):
        tscope.analyze(tmp_path / "runs")
    # Named one by one they are one run each, and naming both merges them on purpose.
    assert tscope.analyze(tmp_path / "runs" / "baseline.csv").run.last_step == 60


def test_one_folder_per_run_is_several_runs_labelled_by_folder(tmp_path):
    for name in ("lr1e-3", "lr3e-3"):
        metrics_csv(tmp_path / "sweep" / name / "metrics.csv")
    assert groups_in(tmp_path / "sweep") == ["lr1e-3/", "lr3e-3/"]


def test_a_resumed_run_logged_into_two_files_is_one_run(tmp_path):
    nanogpt_log(tmp_path / "run" / "train.log", 0, 50)
    nanogpt_log(tmp_path / "run" / "train.1.log", 40, 100)  # resumed from step 40
    nanogpt_log(tmp_path / "other" / "train.log", 0, 50)
    nanogpt_log(tmp_path / "other" / "train-resume.log", 50, 100)
    assert len(groups_in(tmp_path / "run")) == 1 and len(groups_in(tmp_path / "other")) == 1
    case = tscope.analyze(tmp_path / "run")
    assert (case.run.first_step, case.run.last_step) == (0, 99)
    assert any(event.kind == "resume" for event in case.events)


def test_a_runs_logs_of_different_formats_are_one_run(tmp_path):
    nanogpt_log(tmp_path / "demo" / "train.log", 0, 60)  # what tscope demo writes
    metrics_csv(tmp_path / "demo" / "metrics.csv", first=0, last=59)
    nanogpt_log(tmp_path / "run" / "train.log", 0, 60)
    metrics_csv(tmp_path / "run" / "eval" / "scores.csv")  # another kind elsewhere: same run
    assert len(groups_in(tmp_path / "demo")) == 1 and len(groups_in(tmp_path / "run")) == 1


def test_train_and_eval_tables_under_different_names_are_one_run(tmp_path):
    """Different names, different series: parts of one run, not two runs (a Trainer output
    folder with its own metric files beside the checkpoints)."""
    run = tmp_path / "run"
    shutil.copytree(ROOT / "fixtures/data/trainer/stable", run)
    (run / "eval_metrics.jsonl").write_text(
        '{"step": 60, "eval/accuracy": 0.5}\n{"step": 120, "eval/accuracy": 0.6}\n',
        encoding="utf-8",
    )
    (run / "lr_log.csv").write_text("step,learning_rate\n1,0.001\n2,0.002\n", encoding="utf-8")
    (run / "train_results.json").write_text('{"epoch": 3.0, "train_loss": 2.9}', encoding="utf-8")
    assert len(groups_in(run)) == 1
