"""The Python processes tscope starts (torchrun ranks, spawned cluster workers, Dask's local
workers) must not import code from the folder the user happens to be in.

`python -m MODULE` and `python -c CODE` put the current directory first on `sys.path`, ahead of
the standard library and site-packages. The most common use is `cd RUN && tscope …`: a
stranger's run folder holding a `torch/` or `multiprocessing/` package would then be imported,
and executed, by every child that tscope launches there. PYTHONSAFEPATH (Python ≥ 3.11) tells
each child interpreter, and the ones it starts in turn, not to add that directory.

It also drops a script's own folder from its path (`python tool.py` no longer imports tool.py's
neighbours), so the library sets it only while it starts its own workers and restores it after;
the CLI, whose process is tscope's alone, sets it for good.
"""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping
from contextlib import contextmanager

SAFE_PATH_VARIABLE = "PYTHONSAFEPATH"


def guard_child_pythons() -> None:
    """For the CLI: every Python process started from here on leaves the working directory off
    its import path."""
    os.environ[SAFE_PATH_VARIABLE] = "1"


@contextmanager
def guarded_child_pythons() -> Iterator[None]:
    """Within the block, started Python processes (multiprocessing's spawn, Dask's nannies: no
    way to hand them an environment) leave the working directory off their import path; the
    caller's environment is restored after."""
    previous = os.environ.get(SAFE_PATH_VARIABLE)
    os.environ[SAFE_PATH_VARIABLE] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop(SAFE_PATH_VARIABLE, None)
        else:
            os.environ[SAFE_PATH_VARIABLE] = previous


def child_environment(base: Mapping[str, str]) -> dict[str, str]:
    """`base` for a child started with an explicit environment, with the same guard."""
    return {**base, SAFE_PATH_VARIABLE: "1"}
