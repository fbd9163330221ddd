"""`tscope cluster --engine dask`: the same cluster.json as the local pool, on a local 2-worker
Dask cluster started by the test (the `fleet` extra; skipped when Dask is not installed)."""

from __future__ import annotations

import os
import shutil
import tempfile
from dataclasses import dataclass
from multiprocessing import get_context
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tscope.cli import app
from tscope.cluster_engines import check_engine, run_on_engine
from tscope.cluster_pipeline import cluster
from tscope.errors import UsageError
from tscope.render.json_file import case_json_text, normalized_payload

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "fixtures" / "data" / "sweep"
runner = CliRunner()


@pytest.fixture(scope="module")
def sweep_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The real Trainer LR sweep, one folder per run with what the Trainer wrote."""
    runs = tmp_path_factory.mktemp("sweep") / "runs"
    for run in sorted(SWEEP.iterdir()):
        folder = runs / run.name
        folder.mkdir(parents=True)
        shutil.copy2(run / "trainer_state.json", folder / "trainer_state.json")
        shutil.copytree(run / "runs", folder / "runs")
    return runs


def _cluster_json(runs: Path, out: Path, **engine: str) -> str:
    report = cluster(runs, out, jobs=2, **engine)  # type: ignore[arg-type]
    return case_json_text(normalized_payload(report.to_dict()))


def test_dask_on_a_local_two_worker_cluster_writes_the_local_pools_cluster_json(
    sweep_runs: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("distributed")
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temporary))
    local = _cluster_json(sweep_runs, tmp_path / "local")
    dask = _cluster_json(sweep_runs, tmp_path / "dask", engine="dask")
    # The workers' scratch space was private and is gone: no shared dask-scratch-space with
    # lock files left behind (red team round 8).
    assert list(temporary.iterdir()) == []
    assert dask == local
    assert '"unstable"' in dask  # the sweep's diverged runs are there: the runs really ran
    for case in sorted((tmp_path / "local" / "runs").iterdir()):
        written = tmp_path / "dask" / "runs" / case.name / "case.json"
        assert written.read_bytes() == (case / "case.json").read_bytes()


def test_an_unknown_engine_or_a_scheduler_without_dask_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="choose one of local, dask"):
        check_engine("spark", None)
    with pytest.raises(UsageError, match="pass --engine dask"):
        check_engine("local", "tcp://127.0.0.1:8786")


def test_the_cli_refuses_an_unknown_engine_in_one_line(sweep_runs: Path, tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["cluster", str(sweep_runs), "--out", str(tmp_path / "o"), "--engine", "spark", "-q"]
    )
    assert result.exit_code == 2
    assert "choose one of local, dask" in result.output
    assert "Traceback" not in result.output


def test_without_dask_the_engine_says_which_extra_to_install(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "distributed", None)  # import fails as when not installed
    with pytest.raises(UsageError, match=r"tscope-ml\[fleet\]"):
        check_engine("dask", None)


@dataclass(frozen=True)
class _Job:
    name: str


def _square_or_die(job: _Job) -> str:
    if job.name == "segfaults":
        os._exit(139)  # as a crashing C parser takes its worker process down
    return job.name.upper()


def _crashed(job: _Job, how: str) -> str:
    return f"crashed: {how}"


def test_a_task_that_kills_its_dask_worker_costs_that_task_only() -> None:
    pytest.importorskip("distributed")
    import dask

    jobs = [_Job("first"), _Job("segfaults"), _Job("last")]
    # One retry, not dask's default three: each retry restarts a worker process.
    with dask.config.set({"distributed.scheduler.allowed-failures": 0}):
        results = dict(
            run_on_engine("dask", jobs, _square_or_die, _crashed, 2, get_context("spawn"))
        )
    assert results[_Job("first")] == "FIRST" and results[_Job("last")] == "LAST"
    assert results[_Job("segfaults")].startswith("crashed: the Dask worker died")
