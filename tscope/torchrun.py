"""A worker module run under torchrun, one local process per rank: the sharded replay
(tscope.replay.rank_worker) and the xray audit of a multi-process Trainer run
(tscope.xray.rank_worker). The caller reads what the ranks wrote and words a failure."""

from __future__ import annotations

import socket
import subprocess
import sys
from collections.abc import Mapping
from pathlib import Path

from tscope.errors import UsageError


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
    try:
        return subprocess.run(
            command,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            env=dict(environment),
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise UsageError(f"{what} did not finish within {timeout_s} s.") from None


def last_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The last line torchrun's processes wrote to stderr (300 characters at most)."""
    return (done.stderr.strip().splitlines() or ["no output"])[-1][:300]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port
