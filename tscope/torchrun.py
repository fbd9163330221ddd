"""A worker module run under torchrun, one local process per rank: the sharded replay
(tscope.replay.rank_worker) and the xray audit of a multi-process Trainer run
(tscope.xray.rank_worker). The caller reads what the ranks wrote and words a failure."""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tscope.child_python import child_environment
from tscope.errors import UsageError

# What torchrun's failure summary says of the first rank that failed ("Root Cause" section).
ROOT_CAUSE_FIELDS = ("rank", "exitcode", "traceback")
ERROR_LINE = re.compile(r"\b\w*(Error|Exception)\b")
# The rendezvous could not bind its port: the ranks never started (nothing read or written).
RENDEZVOUS_ERROR = re.compile(r"Address already in use|EADDRINUSE|failed to listen", re.IGNORECASE)


def run_ranks(
    worker: str,
    spec_file: Path,
    nproc: int,
    environment: Mapping[str, str],
    timeout_s: int,
    what: str,
) -> subprocess.CompletedProcess[str]:
    """`python -m torch.distributed.run --nproc_per_node=nproc -m worker spec_file` on this host,
    its output captured; past `timeout_s` a UsageError says `what` did not finish."""

    def launch() -> subprocess.CompletedProcess[str]:
        command = [
            sys.executable,
            "-m",
            "torch.distributed.run",
            f"--nproc_per_node={nproc}",
            "--master_addr=127.0.0.1",
            f"--master_port={free_port()}",
            "-m",
            worker,
            str(spec_file),
        ]
        return _run_once(command, environment, timeout_s, what, spec_file.parent)

    done = launch()
    if done.returncode != 0 and RENDEZVOUS_ERROR.search(done.stderr):
        # The port free_port() found was taken before torchrun bound it (another process on a
        # busy host): a fresh port, once.
        done = launch()
    return done


def _run_once(
    command: list[str],
    environment: Mapping[str, str],
    timeout_s: int,
    what: str,
    folder: Path,
) -> subprocess.CompletedProcess[str]:
    # Started in tscope's own scratch folder (the spec's), never in the user's working
    # directory, which may be a stranger's run folder: `-m` would import from it
    # (child_python.py), and the ranks' stray files would land there.
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=child_environment(environment),
            cwd=folder,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise UsageError(f"{what} did not finish within {timeout_s} s.") from None


def last_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """Why torchrun's ranks failed, in one line of at most 300 characters: the exit code and
    traceback of its "Root Cause" summary, else the last error or exception line, else the last
    line that is not a rule. The summary ends with a line of "=" (a CI run once reported only
    "failed: ======="), so the last line alone says nothing."""
    lines = [line.strip() for line in done.stderr.splitlines() if line.strip()]
    return (_root_cause(lines) or _last_error(lines) or "no output")[:300]


def _root_cause(lines: list[str]) -> str:
    starts = [i for i, line in enumerate(lines) if line.startswith("Root Cause")]
    if not starts:
        return ""
    facts = []
    for line in lines[starts[-1] + 1 :]:
        key, _, value = line.partition(":")
        if key.strip() in ROOT_CAUSE_FIELDS and value.strip() and value.strip() != "<N/A>":
            facts.append(f"{key.strip()} {value.strip()}")
    return "; ".join(facts)


def _last_error(lines: list[str]) -> str:
    content = [line for line in lines if not set(line) <= set("=-")]
    errors = [line for line in content if ERROR_LINE.search(line)]
    return (errors or content or [""])[-1]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
