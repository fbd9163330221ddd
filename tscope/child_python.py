"""The Python processes tscope starts (torchrun ranks, spawned cluster workers, Dask's local
workers) must not import code from the folder the user happens to be in.

`python -m MODULE` and `python -c CODE` put the current directory first on `sys.path`, ahead of
the standard library and site-packages. The most common use is `cd RUN && tscope …`: a
stranger's run folder holding a `torch/` or `multiprocessing/` package would then be imported,
and executed, by every child that tscope launches there. PYTHONSAFEPATH (Python ≥ 3.11) tells
each child interpreter, and the ones it starts in turn, not to add that directory.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

SAFE_PATH_VARIABLE = "PYTHONSAFEPATH"


def guard_child_pythons() -> None:
    """Every Python process started from here on (any launcher, inherited environment) leaves
    the working directory off its import path. Idempotent; changes no parent behaviour."""
    os.environ[SAFE_PATH_VARIABLE] = "1"


def child_environment(base: Mapping[str, str]) -> dict[str, str]:
    """`base` for a child started with an explicit environment, with the same guard."""
    return {**base, SAFE_PATH_VARIABLE: "1"}
