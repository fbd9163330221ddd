"""What a failed `torchrun` says to the user: the root cause, not the summary's closing rule."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tscope.torchrun import last_error_line

# The shape of torch.distributed.elastic's failure summary (torch 2.x), as a rank killed by a
# signal leaves it; the last line is a rule.
SUMMARY = """Traceback (most recent call last):
  File "/x/torch/distributed/run.py", line 892, in main
torch.distributed.elastic.multiprocessing.errors.ChildFailedError:
============================================================
tscope.replay.rank_worker FAILED
------------------------------------------------------------
Failures:
  <NO_OTHER_FAILURES>
------------------------------------------------------------
Root Cause (first observed failure):
[0]:
  time      : 2026-12-06_16:50:01
  host      : box
  rank      : 1 (local_rank: 1)
  exitcode  : -9 (pid: 4242)
  error_file: <N/A>
  traceback : Signal 9 (SIGKILL) received by PID 4242
============================================================
"""


def _done(stderr: str) -> subprocess.CompletedProcess[str]:
    return subprocess.CompletedProcess(["torchrun"], 1, "", stderr)


def test_the_root_cause_is_reported_not_the_closing_rule() -> None:
    line = last_error_line(_done(SUMMARY))
    assert line == (
        "rank 1 (local_rank: 1); exitcode -9 (pid: 4242); "
        "traceback Signal 9 (SIGKILL) received by PID 4242"
    )


def test_without_a_summary_the_last_error_line_is_reported() -> None:
    stderr = (
        "warming up\nRuntimeError: The server socket has failed to listen on any local port\n====\n"
    )
    assert last_error_line(_done(stderr)).startswith("RuntimeError: The server socket")
    assert last_error_line(_done("just text\n-----\n")) == "just text"
    assert last_error_line(_done("")) == "no output"


def test_a_port_taken_before_the_rendezvous_bound_it_is_tried_once_more(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    from tscope import torchrun

    calls: list[int] = []

    def once(*args: object) -> subprocess.CompletedProcess[str]:
        calls.append(1)
        if len(calls) == 1:
            return _done("torch.distributed.DistNetworkError: Address already in use (port 40123)")
        return subprocess.CompletedProcess(["torchrun"], 0, "", "")

    monkeypatch.setattr(torchrun, "_run_once", once)
    done = torchrun.run_ranks("w", tmp_path / "spec.json", 2, {}, 10, "The replay")
    assert done.returncode == 0 and len(calls) == 2
    # any other failure is reported as it is, not retried
    calls.clear()
    monkeypatch.setattr(torchrun, "_run_once", lambda *a: (calls.append(1), _done(SUMMARY))[1])
    assert torchrun.run_ranks("w", tmp_path / "spec.json", 2, {}, 10, "x").returncode == 1
    assert len(calls) == 1
