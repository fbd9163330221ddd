"""Where `tscope cluster` analyzes its runs: the local process pool, or a Dask cluster.

    run_on_engine("local", tasks, work, on_crash, workers=2)
    run_on_engine("dask", tasks, work, on_crash, workers=2)                  # a local 2-worker cluster
    run_on_engine("dask", tasks, work, on_crash, address="tcp://sched:8786")  # an existing one

Each run is one independent task (analyze it, or reuse its cached case, and build its profile);
only the cross-run analysis at the end needs them all, so any engine that runs Python functions
on many machines will do. Dask (`distributed`) was chosen over Ray by measurement on this machine
(bench/bench_cluster_engines.py, docs/fleet.md): a local 2-worker cluster starts in a fraction of
Ray's start-up time and installs in a fraction of its size, and both give the same cluster.json.
The local pool (cluster_workers.py) stays the default: no extra dependency, no scheduler.

On a real cluster every worker must have tscope installed and see RUNS_DIR and OUT at the same
paths (a shared filesystem): workers read the runs and write each run's case folder themselves.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from multiprocessing.context import BaseContext
from typing import Any, TypeVar

from tscope.child_python import guarded_child_pythons
from tscope.cluster_workers import Named, run_in_workers
from tscope.errors import UsageError

ENGINES = ("local", "dask")
DASK_EXTRA_HINT = "pip install 'tscope-ml[fleet]' (Dask distributed)"
TaskT = TypeVar("TaskT", bound=Named)
ResultT = TypeVar("ResultT")


def check_engine(engine: str, address: str | None) -> None:
    """Refuse an unknown engine, a scheduler address without Dask, or Dask not installed."""
    if engine not in ENGINES:
        raise UsageError(f"--engine {engine}: choose one of {', '.join(ENGINES)}.")
    if address is not None and engine != "dask":
        raise UsageError("--scheduler names a Dask scheduler: pass --engine dask with it.")
    if engine == "dask":
        try:
            import distributed  # noqa: F401
        except ImportError:
            raise UsageError(
                f"--engine dask needs Dask's distributed package: {DASK_EXTRA_HINT}."
            ) from None


def run_on_engine(
    engine: str,
    tasks: list[TaskT],
    work: Callable[[TaskT], ResultT],
    on_crash: Callable[[TaskT, str], ResultT],
    workers: int,
    context: BaseContext,
    address: str | None = None,
) -> Iterator[tuple[TaskT, ResultT]]:
    """(task, work(task)) for every task, in completion order (see run_in_workers)."""
    check_engine(engine, address)
    if engine == "dask":
        return _on_dask(tasks, work, on_crash, workers, address)
    return run_in_workers(tasks, work, on_crash, workers, context)


def _on_dask(
    tasks: list[TaskT],
    work: Callable[[TaskT], ResultT],
    on_crash: Callable[[TaskT, str], ResultT],
    workers: int,
    address: str | None,
) -> Iterator[tuple[TaskT, ResultT]]:
    import dask
    from distributed import Client, LocalCluster, as_completed
    from distributed.scheduler import KilledWorker

    local: Any = None
    # The workers' scratch space (lock files, spill): a private folder (mode 0700) removed when
    # the sweep ends, not dask's shared $TMPDIR/dask-scratch-space that any local user could
    # have made first and that keeps its lock files (red team round 8).
    scratch = tempfile.mkdtemp(prefix="tscope-dask-") if address is None else None
    try:
        if address is None:
            # One single-threaded worker process per core asked for, as the local pool: the
            # readers and analyzers hold the GIL, so threads in one worker would not run side by
            # side. The workers are spawned interpreters, started here (child_python.py).
            with guarded_child_pythons(), dask.config.set({"temporary-directory": scratch}):
                local = LocalCluster(  # type: ignore[no-untyped-call]
                    n_workers=workers,
                    threads_per_worker=1,
                    processes=True,
                    dashboard_address=None,
                    silence_logs=40,  # errors only: dask's start-up chatter is not tscope's
                    local_directory=scratch,
                )
        client = Client(local if local is not None else address)  # type: ignore[no-untyped-call]
        try:
            # pure=False: every run is analyzed once even when two tasks compare equal.
            futures = client.map(work, tasks, pure=False, key=[_task_key(task) for task in tasks])
            by_key = {future.key: task for future, task in zip(futures, tasks, strict=True)}
            for future in as_completed(futures):  # type: ignore[no-untyped-call]
                task = by_key[future.key]
                try:
                    result = future.result()
                except KilledWorker:
                    # A run that kills its worker each time (a segfault in a C parser): dask
                    # retried it on other workers, then gave up on this task only.
                    result = on_crash(task, "the Dask worker died each time it ran it")
                yield task, result
        finally:
            client.close()  # type: ignore[no-untyped-call]
    finally:
        if local is not None:
            local.close()
        if scratch is not None:
            shutil.rmtree(scratch, ignore_errors=True)


def _task_key(task: Named) -> str:
    # Unique per call: a long-lived scheduler must not hand back an earlier sweep's result.
    return f"tscope-run-{os.getpid()}-{id(task)}-{task.name}"
