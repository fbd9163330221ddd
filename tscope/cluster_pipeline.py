"""cluster(runs_dir) -> ClusterReport: analyze every run of a sweep once, then compare them.

    report = cluster("sweep/", out_dir="sweep-cluster/", jobs=2)

Each entry of `runs_dir` (a sub-directory or a single log file) is one run. An entry that is a
symbolic link is read only when it points inside `runs_dir`, or with `follow_run_links=True`
(the user says they made the links): otherwise it is a read outside the input, and the run is
skipped with the reason.
Each run's case is written to `out_dir/runs/<name>/` and reused by a later call when the run's
files, the tscope version and the options are unchanged (cluster_case_cache.py). Runs are
analyzed in worker processes; the cross-run analysis (`tscope.analyzers.cluster`) runs once at the
end on the profiles.
"""

from __future__ import annotations

import os
import re
import shlex
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, replace
from multiprocessing import get_all_start_methods, get_context
from multiprocessing.context import BaseContext
from pathlib import Path

from tscope import __version__
from tscope.cluster_cache_seal import seal_key
from tscope.cluster_case_cache import analyze_and_store, fingerprint_of, load_cached
from tscope.cluster_engines import check_engine, run_on_engine
from tscope.errors import TscopeError, UnreadableInput, UsageError
from tscope.ingest.safe_fs import NOT_REGULAR, is_inside, is_regular_file
from tscope.model.cluster import ClusterReport, RunProfile
from tscope.output_files import make_subfolder, prepare_folder

CASES_DIR = "runs"
# cluster.html links each run's own case.html, stable runs too (a reader compares a blown-up run
# with its nearest stable one); beyond this many runs only the unstable ones are rendered, and
# beyond this many unstable runs none (case.json is always written; `tscope report` renders it).
CASE_HTML_LIMIT = 50
_UNSAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")
# A run's case folder name, in characters (ASCII after _UNSAFE_NAME): far below NAME_MAX (255),
# leaving room for the `-N` that tells apart runs of one name.
MAX_FOLDER_NAME = 120
RUN_LINK_OUTSIDE = (
    "a symbolic link to outside the runs folder; not followed (a stranger's sweep could point it "
    "at any folder of yours). If you made these links, pass --follow-run-links"
)
# What tscope writes into OUT (see output_files; each run's case folder OUT/runs/<run>/ is
# cluster_case_cache's).
CLUSTER_FOLDER_FILES = ("cluster.json", "cluster.html", "cluster.md", "cluster-*.svg", CASES_DIR)


@dataclass(frozen=True)
class RunTask:
    name: str
    path: str
    case_dir: str
    read_weights: bool
    trust_pickle: bool
    run: str | None = None  # the run's id in a file holding several (an MLflow SQLite store)
    # The resolved runs folder the run must still lie in when it is read (None: --follow-run-links,
    # or a store): listed as a folder, a run swapped for a link to outside since is refused.
    within: str | None = None


@dataclass(frozen=True)
class RunOutcome:
    name: str
    profile: RunProfile | None
    problem: str | None  # why the run could not be analyzed


@dataclass(frozen=True)
class RunEntries:
    """The entries of a runs folder: the runs to analyze and those refused, with the reason."""

    runs: list[Path]
    refused: list[tuple[str, str]]  # (entry name, why it is not read)


def find_runs(runs_dir: Path, follow_run_links: bool = False) -> list[Path]:
    """Every run under runs_dir: sub-directories and loose files, by name (see list_runs)."""
    return list_runs(runs_dir, follow_run_links).runs


def list_runs(runs_dir: Path, follow_run_links: bool = False) -> RunEntries:
    """The runs of runs_dir by name. A linked entry is a run when it points inside runs_dir or
    `follow_run_links` is set; FIFOs, devices and other links are refused with the reason."""
    if not runs_dir.is_dir():
        if _is_run_store(runs_dir):
            return RunEntries([runs_dir], [])  # its runs are listed by store_run_tasks
        raise UsageError(
            f"{runs_dir} is not a directory. Pass a folder whose sub-folders (or files) are runs, "
            "or an MLflow store (mlflow.db)."
        )
    entries = sorted(
        (entry for entry in runs_dir.iterdir() if not entry.name.startswith(".")),
        key=lambda entry: entry.name,
    )
    runs: list[Path] = []
    refused: list[tuple[str, str]] = []
    for entry in entries:
        problem = _refused_entry(runs_dir, entry, follow_run_links)
        if problem is None:
            runs.append(entry)
        else:
            refused.append((entry.name, problem))
    if not runs:
        others = f"; {len(refused) - 1} more entries refused too" if len(refused) > 1 else ""
        raise UsageError(
            f"{runs_dir} holds no runs. Put one sub-folder (or log file) per run in it."
            + (f" ({refused[0][0]}: {refused[0][1]}{others})" if refused else "")
        )
    return RunEntries(runs, refused)


def _refused_entry(runs_dir: Path, entry: Path, follow_run_links: bool) -> str | None:
    """Why an entry of the runs folder is not a run to read, or None when it is one."""
    if entry.is_symlink() and not follow_run_links and not is_inside(runs_dir, entry):
        return RUN_LINK_OUTSIDE
    if entry.is_dir() or is_regular_file(entry.resolve()):
        return None
    return NOT_REGULAR


def cluster(
    runs_dir: str | Path,
    out_dir: str | Path,
    jobs: int | None = None,
    read_weights: bool = True,
    trust_pickle: bool = False,
    on_run_done: Callable[[int, int], None] | None = None,
    follow_run_links: bool = False,
    engine: str = "local",
    scheduler: str | None = None,
) -> ClusterReport:
    """`engine` "dask" runs the runs on a Dask cluster: a local one with `jobs` workers, or the
    one whose scheduler listens at `scheduler` (cluster_engines.py); cluster.json is the same."""
    from tscope.analyzers.cluster import cluster_runs

    check_engine(engine, scheduler)
    root = Path(runs_dir)
    entries = list_runs(root, follow_run_links)
    runs = entries.runs
    prepare_folder(Path(out_dir), "the cluster report", CLUSTER_FOLDER_FILES, clear=True)
    cases_root = make_subfolder(Path(out_dir), CASES_DIR)
    seal_key(create=True)  # made here once, before the workers that read it start
    if root.is_file():
        tasks = _store_run_tasks(root, cases_root, read_weights, trust_pickle)
    else:
        names = _unique_names([run.name for run in runs])
        within = None if follow_run_links else os.path.realpath(root)
        tasks = [
            RunTask(
                name, str(run), str(cases_root / name), read_weights, trust_pickle, within=within
            )
            for name, run in zip(names, runs, strict=True)
        ]
    outcomes = _run_all(tasks, jobs, on_run_done, engine, scheduler)
    profiles = [o.profile for o in outcomes if o.profile is not None]
    skipped = [{"run": name, "problem": problem} for name, problem in entries.refused]
    skipped += [
        {"run": o.name, "problem": o.problem} for o in outcomes if o.profile is None and o.problem
    ]
    if not profiles:
        first = skipped[0] if skipped else {"run": str(root), "problem": "no run"}
        raise UsageError(
            f"No run in {root} could be analyzed (e.g. {first['run']}: {first['problem']})."
        )
    report = cluster_runs(profiles, runs_dir=str(root))
    report.skipped = skipped
    report.tool_version = __version__
    if skipped:
        report.limits.append(
            f"{len(skipped)} of {len(tasks) + len(entries.refused)} runs could not be analyzed "
            "and are left out "
            f"(e.g. {skipped[0]['run']}: {skipped[0]['problem']})."
        )
    _render_unstable_cases(report, Path(out_dir))
    return report


def _is_run_store(path: Path) -> bool:
    from tscope.ingest.readers.mlflow_sqlite import MlflowSqliteReader

    return is_regular_file(path) and MlflowSqliteReader().can_read(path)


def _store_run_tasks(
    store: Path, cases_root: Path, read_weights: bool, trust_pickle: bool
) -> list[RunTask]:
    """One task per run of an MLflow SQLite store, named by its run names."""
    from tscope.ingest.readers.mlflow_sqlite import store_runs

    try:
        runs = store_runs(store, store.name)
    except UnreadableInput as error:
        raise UsageError(f"{store}: {error.problem_text}.") from error
    if not runs:
        raise UsageError(f"{store} holds no MLflow run with metrics.")
    names = _unique_names([name or run_id for run_id, name in runs])
    return [
        RunTask(name, str(store), str(cases_root / name), read_weights, trust_pickle, run_id)
        for name, (run_id, _) in zip(names, runs, strict=True)
    ]


def _run_all(
    tasks: list[RunTask],
    jobs: int | None,
    on_run_done: Callable[[int, int], None] | None,
    engine: str = "local",
    scheduler: str | None = None,
) -> list[RunOutcome]:
    workers = max(1, min(jobs or os.cpu_count() or 1, len(tasks)))
    outcomes: dict[str, RunOutcome] = {}
    if workers == 1 and engine == "local":
        for done, task in enumerate(tasks, start=1):
            outcomes[task.name] = profile_task(task)
            if on_run_done:
                on_run_done(done, len(tasks))
    else:
        # A run that crashes its worker (a segfault in a C parser, the OOM killer) is listed as
        # unreadable; the others still get their results (cluster_workers.py).
        finished = run_on_engine(
            engine, tasks, profile_task, _crashed, workers, _pool_context(), scheduler
        )
        for done, (_, outcome) in enumerate(finished, start=1):
            outcomes[outcome.name] = outcome
            if on_run_done:
                on_run_done(done, len(tasks))
    return [outcomes[task.name] for task in tasks]


def _crashed(task: RunTask, how: str) -> RunOutcome:
    return RunOutcome(
        task.name,
        None,
        f"analyzing it crashed the worker process ({how}): a file in it breaks a parser; "
        "the other runs are analyzed. Please report it with the run's files",
    )


def _pool_context() -> BaseContext:
    """fork when it is safe (fast: no re-import; works from a REPL or stdin, where spawn cannot
    re-import `__main__`); spawn once torch is loaded or threads run, since fork copies their
    locks and OpenMP pools in whatever state they are."""
    if (
        "fork" in get_all_start_methods()
        and "torch" not in sys.modules
        and threading.active_count() == 1
    ):
        return get_context("fork")
    return get_context("spawn")


def profile_task(task: RunTask) -> RunOutcome:
    """Analyze one run (or reuse its fresh cached case) and build its profile. Runs in a worker.

    Never raises: a run that cannot be analyzed is an outcome with the reason, so one bad run
    costs that run and not the sweep's report (the README promises unreadable runs are skipped).
    """
    from tscope.ingest.base import choosing_run

    try:
        with choosing_run(task.run):
            return _profile(task)
    except TscopeError as error:
        return RunOutcome(task.name, None, str(error))
    except Exception as error:
        # A bug in tscope met on this run's files: reported as the reason, the sweep goes on.
        return RunOutcome(
            task.name,
            None,
            f"tscope failed on it ({type(error).__name__}: {str(error)[:200]}); this is a bug "
            "in tscope: please report it with the run's files",
        )


def _profile(task: RunTask) -> RunOutcome:
    from tscope.analyzers.cluster import profile_run
    from tscope.ingest.readers.mlflow_sqlite_store import keep_last_store

    keep_last_store()  # the runs of one MLflow store: read it once per worker

    reading = task
    if task.within is not None:
        # Read by its real path, checked inside the runs folder now: a run swapped for a link
        # after the listing is refused here, and a link made later still by the reading itself.
        real = os.path.realpath(task.path)
        if not is_inside(Path(task.within), Path(real)):
            return RunOutcome(task.name, None, RUN_LINK_OUTSIDE)
        reading = replace(task, path=real)
    case_dir = Path(task.case_dir)
    fingerprint = fingerprint_of(Path(reading.path), reading)
    cached = load_cached(case_dir, fingerprint)
    reused = cached is not None
    if cached is None:
        cached = analyze_and_store(reading, case_dir, fingerprint)
    case, loss, lr_max = cached
    extra = {} if lr_max is None else {"logged.max_learning_rate": lr_max}
    profile = profile_run(
        task.name,
        task.path,
        case,
        loss,
        case_path=f"{CASES_DIR}/{case_dir.name}/case.json",  # relative to the report folder
        reused_case=reused,
        extra_config=extra,
    )
    return RunOutcome(task.name, profile, None)


def _render_unstable_cases(report: ClusterReport, out_dir: Path) -> None:
    from tscope.render import load_case, render_case

    unstable = [p for p in report.profiles if p.status == "unstable"]
    if len(unstable) > CASE_HTML_LIMIT:
        report.limits.append(
            f"{len(unstable)} unstable runs: their case.html files are not rendered (limit "
            f"{CASE_HTML_LIMIT}); `tscope report {shlex.quote(str(out_dir / CASES_DIR))}/RUN` "
            "renders one."
        )
        return
    rendered = report.profiles if len(report.profiles) <= CASE_HTML_LIMIT else unstable
    for profile in rendered:
        case_dir = (out_dir / profile.case_path).parent
        if not (case_dir / "case.html").is_file() or not profile.reused_case:
            render_case(load_case(case_dir), case_dir, ("html",))


def _unique_names(names: list[str]) -> list[str]:
    """Folder-safe, unique names for the per-run case folders (and the report).

    A numbered name is checked against every name taken, a real run's included ("a b" and "a_b"
    are `a_b` and `a_b-2`; a run named `a_b-2` then gets `a_b-2-2`), case-insensitively (two
    folders differing in case are one folder on macOS and Windows): two runs never share a case
    folder, where one would overwrite the other's case."""
    taken: set[str] = set()
    # The last number given to each name: 50,000 runs of one name (an MLflow store allows it)
    # were numbered by trying -2, -3, ... from the start each time, quadratic (8,000: 5 s).
    numbered: dict[str, int] = {}
    unique = []
    for name in names:
        safe = _folder_name(name)
        candidate, number = safe, numbered.get(safe.casefold(), 1)
        while candidate.casefold() in taken:
            number += 1
            candidate = f"{safe}-{number}"
        numbered[safe.casefold()] = number
        taken.add(candidate.casefold())
        unique.append(candidate)
    return unique


def _folder_name(name: str) -> str:
    """A run name as one folder name inside OUT/runs/. `.` and `..` pass _UNSAFE_NAME but name
    the runs folder itself and OUT: an MLflow run named `.` had its case written over OUT/runs/
    and ended the whole cluster report in an error; so leading dots become `_`. Cut to
    MAX_FOLDER_NAME characters: a store's run name can be longer than a file name may be."""
    safe = _UNSAFE_NAME.sub("_", name)[:MAX_FOLDER_NAME]
    bare = safe.lstrip(".")
    return "_" * (len(safe) - len(bare)) + bare or "run"
