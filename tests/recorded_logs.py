"""The benchmark logs recorded by fixtures/copy_bench_logs.py (fixtures/data/bench_logs/<run>/):
a test about a natural break reads the log that break was seen in, since retraining on another
CPU's floating-point kernels need not break the same way."""

from __future__ import annotations

from pathlib import Path

BENCH_LOGS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "bench_logs"


def recorded_log(run: str) -> Path:
    """The recorded trainer_state.json of benchmark run `run`."""
    return BENCH_LOGS / run / "trainer_state.json"
