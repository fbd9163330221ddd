"""Run one job per run of a sweep in worker processes, so that a run that crashes costs that run.

A reader that crashes its process (a segfault in a C parser, the kernel's OOM killer) breaks a
ProcessPoolExecutor for every run still queued or in flight: BrokenProcessPool, with no word of
which run did it. So the runs run in a pool while it holds, and when it breaks, each run without
a result yet runs again in a process of its own (still `workers` at a time): there a crash is
pinned on its run, which is reported unreadable with the reason, and every other run gets its
result. A fresh process per run costs a fork (or a spawn) only after something already crashed.
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ProcessPoolExecutor, as_completed
from concurrent.futures.process import BrokenProcessPool
from multiprocessing.connection import Connection, wait
from multiprocessing.context import BaseContext
from typing import Any, Protocol, TypeVar, cast

from tscope.child_python import guarded_child_pythons


class Named(Protocol):
    @property
    def name(self) -> str: ...


TaskT = TypeVar("TaskT", bound=Named)
ResultT = TypeVar("ResultT")


def run_in_workers(
    tasks: list[TaskT],
    work: Callable[[TaskT], ResultT],
    on_crash: Callable[[TaskT, str], ResultT],
    workers: int,
    context: BaseContext,
) -> Iterator[tuple[TaskT, ResultT]]:
    """(task, work(task)) for every task, in completion order; `on_crash(task, why)` stands in
    for the result of a task whose process died. `work` must be picklable (module level)."""
    done: set[str] = set()
    # The pool starts multiprocessing's resource tracker when it is made and its processes as
    # tasks are submitted: spawned, each imports from the working directory (often the sweep's
    # folder) unless guarded (child_python.py).
    with guarded_child_pythons():
        pool = ProcessPoolExecutor(max_workers=workers, mp_context=context)
    try:
        with guarded_child_pythons():
            futures: dict[Future[ResultT], TaskT] = {
                pool.submit(work, task): task for task in tasks
            }
        try:
            for future in as_completed(futures):
                result = future.result()
                done.add(futures[future].name)
                yield futures[future], result
        except BrokenProcessPool:
            # Results that came back before the crash are kept; the rest run again, isolated.
            for future, task in futures.items():
                if task.name in done or not future.done() or future.cancelled():
                    continue
                if future.exception() is None:
                    done.add(task.name)
                    yield task, future.result()
    finally:
        pool.shutdown(wait=True, cancel_futures=True)
    remaining = [task for task in tasks if task.name not in done]
    yield from _one_process_each(remaining, work, on_crash, workers, context)


def _one_process_each(
    tasks: list[TaskT],
    work: Callable[[TaskT], ResultT],
    on_crash: Callable[[TaskT, str], ResultT],
    workers: int,
    context: BaseContext,
) -> Iterator[tuple[TaskT, ResultT]]:
    queue = list(reversed(tasks))
    running: dict[Connection, tuple[TaskT, Any]] = {}  # result pipe -> (task, process)
    while queue or running:
        while queue and len(running) < workers:
            task = queue.pop()
            receiver, sender = context.Pipe(duplex=False)
            process = context.Process(  # type: ignore[attr-defined]
                target=_child, args=(work, task, sender), daemon=True
            )
            with guarded_child_pythons():
                process.start()
            sender.close()  # the child holds the only writer: EOF on our end means it is gone
            running[receiver] = (task, process)
        for ready in wait(list(running)):
            task, process = running.pop(cast(Connection, ready))
            try:
                result = cast(Connection, ready).recv()
            except (EOFError, OSError):
                process.join()
                result = on_crash(task, _death(process.exitcode))
            else:
                process.join()
            cast(Connection, ready).close()
            yield task, result


def _child(work: Callable[[Any], Any], task: Any, sender: Connection) -> None:
    sender.send(work(task))
    sender.close()


def _death(exitcode: int | None) -> str:
    """How a worker process ended, in words: `killed by SIGSEGV`, `exited with code 3`."""
    if exitcode is not None and exitcode < 0:
        try:
            return f"killed by {signal.Signals(-exitcode).name}"
        except ValueError:
            return f"killed by signal {-exitcode}"
    return f"exited with code {exitcode}"
