"""The library call behind `tscope analyze`, `cluster`, `report` and `demo`: each takes what the
command was asked (options parsed by tscope.cli) and does the whole job, files included.

    outcome = analyze(AnalyzeRequest(["runs/exp1"], out=Path("case")))
    outcome.case, outcome.written

`tscope replay` and `tscope xray` have theirs in their pipelines (replay_pipeline.run,
xray_pipeline.run). Nothing here prints: the CLI says what was written.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from tscope.output_location import (
    CASE_PREFIX,
    CLUSTER_PREFIX,
    check_outside_inputs,
    default_output,
    report_folder,
)
from tscope.output_writer import FORMATS, write_case

if TYPE_CHECKING:
    from tscope.demo.train import DemoRun
    from tscope.model import Case
    from tscope.model.cluster import ClusterReport

# Told the folder chosen when --out was not given (the CLI says where it goes).
DefaultFolderCallback = Callable[[Path], None]


@dataclass(frozen=True)
class AnalyzeRequest:
    paths: Sequence[str | Path]  # run directories, checkpoints, log files or URLs; merged
    out: Path | None = None  # None: ./tscope-case-<run> (beside the run from inside it)
    formats: tuple[str, ...] = FORMATS
    read_weights: bool = True
    trust_pickle: bool = False
    on_file: Callable[[str], None] | None = None
    on_default_folder: DefaultFolderCallback | None = None
    run: str | None = None  # the run to read from an input holding several (an MLflow store)


@dataclass(frozen=True)
class CaseOutcome:
    case: Case
    written: list[Path]


# The readers that read one run of several in a file, the one --run names.
RUN_CHOOSING_KINDS = frozenset({"mlflow_sqlite"})


def analyze(request: AnalyzeRequest) -> CaseOutcome:
    """The case of the inputs, written into its folder (+ layers.parquet when weights were read)."""
    from tscope.errors import UsageError
    from tscope.ingest.base import choosing_run
    from tscope.ingest.remote_source import local_inputs
    from tscope.pipeline import analyze_run

    local = local_inputs(request.paths)
    if request.out is not None:
        check_outside_inputs(request.out, local)  # before any work
    with choosing_run(request.run):
        case = analyze_run(
            *request.paths,
            on_file=request.on_file,
            trust_pickle=request.trust_pickle,
            read_weights=request.read_weights,
        ).case
    if request.run is not None and not any(s.kind in RUN_CHOOSING_KINDS for s in case.run.sources):
        raise UsageError(
            "--run names a run in an input holding several (an MLflow SQLite store, mlflow.db); "
            "none was read here. Point tscope at one run's folder instead"
        )
    target = request.out or default_output(CASE_PREFIX, case.run.name, local)
    if request.out is None and request.on_default_folder is not None:
        request.on_default_folder(target)
    return CaseOutcome(case, write_case(case, target, request.formats))


@dataclass(frozen=True)
class ClusterRequest:
    runs_dir: Path  # one sub-folder (or log file) per run
    out: Path | None = None  # None: ./tscope-cluster-<dir>
    formats: tuple[str, ...] = FORMATS
    jobs: int | None = None  # runs analyzed in parallel (None: the CPU count)
    read_weights: bool = True
    trust_pickle: bool = False
    follow_run_links: bool = False
    on_run_done: Callable[[int, int], None] | None = None
    on_default_folder: DefaultFolderCallback | None = None
    engine: str = "local"  # local | dask (tscope/cluster_engines.py)
    scheduler: str | None = None  # a Dask scheduler's address; None: a local cluster


@dataclass(frozen=True)
class ClusterOutcome:
    report: ClusterReport
    written: list[Path]


def cluster(request: ClusterRequest) -> ClusterOutcome:
    """The sweep's cluster report (and each run's case under OUT/runs/), written."""
    from tscope.cluster_pipeline import cluster as cluster_runs
    from tscope.cluster_pipeline import find_runs
    from tscope.render.cluster_report import render_cluster

    runs_dir = request.runs_dir
    # Symlinked runs live elsewhere: the output may not land inside any of them either.
    inputs = [runs_dir, *find_runs(runs_dir, request.follow_run_links)]
    if request.out is not None:
        check_outside_inputs(request.out, inputs)
    target = request.out or default_output(CLUSTER_PREFIX, runs_dir.resolve().name, inputs)
    if request.out is None and request.on_default_folder is not None:
        request.on_default_folder(target)
    report = cluster_runs(
        runs_dir,
        target,
        jobs=request.jobs,
        read_weights=request.read_weights,
        trust_pickle=request.trust_pickle,
        on_run_done=request.on_run_done,
        follow_run_links=request.follow_run_links,
        engine=request.engine,
        scheduler=request.scheduler,
    )
    return ClusterOutcome(report, render_cluster(report, target, request.formats))


def report(case_dir: Path, out: Path | None, formats: tuple[str, ...]) -> list[Path]:
    """A case re-rendered from its case.json, with no recomputation (into its own folder unless
    `out` names another); a `tscope cluster` report folder (cluster.json, no case.json) is
    re-rendered as the cluster report it is."""
    from tscope.render import load_case, render_case

    if _is_cluster_report(case_dir):
        return _rerender_cluster(case_dir, out, formats)
    case = load_case(case_dir)
    if case.replay is not None and case.replay.layer_series and not case.replay.statistics:
        from tscope.replay_case import with_statistic_descriptors

        case.replay = with_statistic_descriptors(case.replay)
    return render_case(case, report_folder(case_dir, out), formats)


def _is_cluster_report(path: Path) -> bool:
    if path.name == "cluster.json":
        return True
    return path.is_dir() and (path / "cluster.json").is_file() and not (path / "case.json").exists()


def _rerender_cluster(path: Path, out: Path | None, formats: tuple[str, ...]) -> list[Path]:
    from tscope.cluster_pipeline import CLUSTER_FOLDER_FILES
    from tscope.output_files import prepare_folder
    from tscope.render.cluster_report import load_cluster_payload, render_cluster

    payload = load_cluster_payload(path)
    source = path if path.is_dir() else path.parent
    target = out or source
    if not (target.exists() and target.resolve() == source.resolve()):
        # Elsewhere: the per-run cases stay beside the original (its runs/ links point there).
        prepare_folder(target, "the cluster report", CLUSTER_FOLDER_FILES)
    return render_cluster(payload, target, formats)


@dataclass(frozen=True)
class DemoOutcome:
    demo_run: DemoRun
    case: Case
    written: list[Path]


def demo(out: Path, on_progress: Callable[[int, int], None] | None = None) -> DemoOutcome:
    """A tiny GPT trained on CPU with a planted LR jump (out/run), and its case (out/case)."""
    from tscope.demo.train import make_demo_run
    from tscope.output_files import prepare_folder
    from tscope.pipeline import analyze_run

    # `--out LINK` is refused as `analyze --out LINK` is: run/ and case/ would be made through
    # the link, in a folder the user did not name.
    prepare_folder(out, "the demo")
    demo_run = make_demo_run(out / "run", progress=on_progress)
    case = analyze_run(demo_run.run_dir).case
    return DemoOutcome(demo_run, case, write_case(case, out / "case", FORMATS))
