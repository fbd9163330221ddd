"""Benchmark: `tscope analyze` on metrics tables with many series (issue 9, item 11).

    python bench/bench_wide_tables.py                  # 1k, 8k and 100k CSV columns, 100k JSONL keys
    python bench/bench_wide_tables.py --columns 1000 8000 --rows 100

Writes each table in a temporary directory, runs the real CLI in a child process (as a user
would: imports included) and prints the wall time, the peak memory of the child and each time's
ratio to the smallest table's. The cost should grow no faster than the file: past
tscope.ingest.series_cap.MAX_SERIES series only the cap's share is analyzed and rendered. Numbers
only: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def write_csv(folder: Path, columns: int, rows: int) -> int:
    names = ["step", "loss"] + [f"layer{i}/grad_norm" for i in range(columns - 2)]
    with open(folder / "metrics.csv", "w") as handle:
        handle.write(",".join(names) + "\n")
        for step in range(rows):
            cells = ",".join(f"{(step * 7 + i) % 97 / 97:.4f}" for i in range(columns - 2))
            handle.write(f"{step},{3 - step * 0.001:.4f},{cells}\n")
    return (folder / "metrics.csv").stat().st_size


def write_sparse_jsonl(folder: Path, keys: int) -> int:
    """A new key on every line: 100,000 keys in ~4 MB."""
    with open(folder / "metrics.jsonl", "w") as handle:
        for step in range(1, keys + 1):
            handle.write(json.dumps({"step": step, "loss": 3.0, f"k{step}": 1.0}) + "\n")
    return (folder / "metrics.jsonl").stat().st_size


def timed_analyze(run: Path, out: Path) -> tuple[float, float, int]:
    """(seconds, peak MB of the child, exit code)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    start = time.perf_counter()
    completed = subprocess.run(
        [sys.executable, "-m", "tscope", "analyze", str(run), "--out", str(out), "-q"],
        capture_output=True,
        text=True,
    )
    seconds = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss  # KB; the largest child so far
    return seconds, max(peak, before) / 1024, completed.returncode


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--columns", type=int, nargs="*", default=[1000, 8000, 100_000])
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--jsonl-keys", type=int, default=100_000)
    arguments = parser.parse_args()
    results: list[tuple[str, int, float, float, int]] = []
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for columns in arguments.columns:
            run = root / f"csv{columns}"
            run.mkdir()
            size = write_csv(run, columns, arguments.rows)
            results.append((f"CSV {columns} columns", size, *timed_analyze(run, root / "out")))
        if arguments.jsonl_keys:
            run = root / "jsonl"
            run.mkdir()
            size = write_sparse_jsonl(run, arguments.jsonl_keys)
            name = f"JSONL {arguments.jsonl_keys} keys"
            results.append((name, size, *timed_analyze(run, root / "out")))
    base = results[0][2]
    print(f"{'input':<24}{'MB':>8}{'seconds':>10}{'ratio':>8}{'peak MB*':>10}{'exit':>6}")
    for name, size, seconds, peak, code in results:
        print(
            f"{name:<24}{size / 1e6:>8.1f}{seconds:>10.1f}{seconds / base:>8.1f}{peak:>10.0f}{code:>6}"
        )
    print("* peak resident memory of the largest child so far (getrusage)")


if __name__ == "__main__":
    main()
