"""Default output folders work wherever the user stands, and the rule that matters holds:
tscope never writes under an input directory, never over an input file or into its folder.

The incidents: `cd myrun && tscope analyze .` was refused ("--out tscope-case-myrun is inside the
input .") although no --out was given; so were `tscope analyze bank.csv --out case` (a sibling
folder of the input file) and `cd logs && tscope analyze train.log`.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tscope.cli import app
from tscope.errors import UsageError
from tscope.output_location import check_outside_inputs, default_output

STABLE = Path(__file__).resolve().parents[1] / "fixtures/data/trainer/stable"
runner = CliRunner()


def metrics_csv(path: Path, steps: int = 60) -> Path:
    rows = [f"{step},{4.0 - 0.01 * step:.4f}" for step in range(1, steps + 1)]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text("step,loss\n" + "\n".join(rows) + "\n", encoding="utf-8")
    return path


def tree(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*"))


def test_analyze_dot_from_inside_the_run_writes_beside_it(tmp_path, monkeypatch):
    run = tmp_path / "myrun"
    shutil.copytree(STABLE, run, ignore=shutil.ignore_patterns("manifest.json"))
    before = tree(run)
    monkeypatch.chdir(run)
    result = runner.invoke(app, ["analyze", ".", "--no-weights"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(Path("..") / "tscope-case-myrun" / "case.html")
    assert "writing to ../tscope-case-myrun" in result.stderr  # says where it went
    assert (tmp_path / "tscope-case-myrun" / "case.json").is_file()
    assert tree(run) == before  # nothing written into the input


def test_analyze_a_file_into_a_sibling_folder_is_allowed(tmp_path, monkeypatch):
    metrics_csv(tmp_path / "bank.csv")
    monkeypatch.chdir(tmp_path)
    result = runner.invoke(app, ["analyze", "bank.csv", "--out", "case", "-q"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(Path("case") / "case.html")


def test_analyze_a_log_file_from_its_own_folder_writes_the_default_beside_it(tmp_path, monkeypatch):
    log = tmp_path / "logs" / "train.log"
    log.parent.mkdir()
    log.write_text(
        "".join(f"iter {i}: loss {4.0 - 0.01 * i:.4f}, time 10.00ms\n" for i in range(60)),
        encoding="utf-8",
    )
    monkeypatch.chdir(log.parent)
    result = runner.invoke(app, ["analyze", "train.log", "-q"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(Path("tscope-case-train") / "case.html")
    assert (log.parent / "tscope-case-train" / "case.json").is_file()


@pytest.mark.parametrize(
    ("inputs", "out"),
    [
        (["run"], "run"),  # the input directory itself
        (["run"], "run/case"),  # under it
        (["run/metrics.csv"], "run/metrics.csv"),  # over the input file
        (["run/metrics.csv"], "run"),  # into the folder that holds the input file
        (["elsewhere.csv", "run"], "run/x/y"),  # any of several inputs
    ],
)
def test_an_output_inside_an_input_is_still_refused(tmp_path, monkeypatch, inputs, out):
    metrics_csv(tmp_path / "run" / "metrics.csv")
    metrics_csv(tmp_path / "elsewhere.csv")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="never writes into an input"):
        check_outside_inputs(Path(out), [Path(p) for p in inputs])
    result = runner.invoke(app, ["analyze", *inputs, "--out", out, "-q"])
    assert result.exit_code == 2 and "never writes into an input" in result.stderr


def test_the_default_climbs_out_of_nested_inputs(tmp_path, monkeypatch):
    deep = tmp_path / "sweep" / "run1" / "logs"
    deep.mkdir(parents=True)
    monkeypatch.chdir(deep)
    inputs = [tmp_path / "sweep" / "run1", tmp_path / "sweep"]
    assert default_output("tscope-case", "run1", inputs) == Path("../../../tscope-case-run1")
    assert default_output("tscope-case", "run1", [tmp_path / "elsewhere"]) == Path(
        "tscope-case-run1"
    )


def test_replay_and_cluster_defaults_leave_the_run_from_inside_it(tmp_path, monkeypatch):
    run = tmp_path / "exp1"
    run.mkdir()
    monkeypatch.chdir(run)
    # tscope replay (RUN_DIR defaults to .) and tscope cluster . from inside the folder
    assert default_output("tscope-case", run.name, [Path(".")]) == Path("../tscope-case-exp1")
    assert default_output("tscope-cluster", run.name, [Path(".")]) == Path("../tscope-cluster-exp1")


def test_cluster_dot_from_inside_the_sweep_writes_beside_it(tmp_path, monkeypatch):
    sweep = tmp_path / "sweep"
    for name in ("a", "b"):
        metrics_csv(sweep / name / "metrics.csv")
    before = tree(sweep)
    monkeypatch.chdir(sweep)
    result = runner.invoke(app, ["cluster", ".", "--no-weights", "-j", "1"])
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(Path("..") / "tscope-cluster-sweep" / "cluster.html")
    assert tree(sweep) == before
