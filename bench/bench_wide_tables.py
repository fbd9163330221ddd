"""Benchmark: `tscope analyze` on metrics tables with many series and checkpoints with many tensors.

    python bench/bench_wide_tables.py                  # 800/8k/100k CSV columns, 100k JSONL keys,
                                                       # 100k/1M tensors in one safetensors file
    python bench/bench_wide_tables.py --columns 1000 8000 --rows 100 --tensors 10000 100000
    python bench/bench_wide_tables.py --repeats 3      # interleaved repetitions, medians

Issue 15's goal: 10× the count costs at most 12× the time; each input's ratio to the one a tenth
its size (same kind) is printed as "10x ratio".

Writes each table in a temporary directory, runs the real CLI in a child process (as a user
would: imports included) and prints the wall time, the peak memory of the child and each time's
ratio to the smallest table's. The cost should grow no faster than the file: past
tscope.ingest.logs.series_cap.MAX_SERIES series only the cap's share is analyzed and rendered. Numbers
only: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
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


def write_many_tensors(folder: Path, tensors: int) -> int:
    """checkpoint-100/model.safetensors with `tensors` fp32 tensors of 4 elements each."""
    import numpy as np

    header: dict[str, object] = {}
    for index in range(tensors):
        offsets = [16 * index, 16 * index + 16]
        header[f"layers.{index}.weight"] = {"dtype": "F32", "shape": [4], "data_offsets": offsets}
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    values = (np.random.default_rng(0).standard_normal(4 * tensors) * 0.02).astype("<f4")
    path = folder / "checkpoint-100" / "model.safetensors"
    path.parent.mkdir(parents=True)
    path.write_bytes(len(raw).to_bytes(8, "little") + raw + values.tobytes())
    return path.stat().st_size


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
    parser.add_argument("--columns", type=int, nargs="*", default=[800, 8000, 100_000])
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--jsonl-keys", type=int, default=100_000)
    parser.add_argument("--tensors", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--repeats", type=int, default=1)
    arguments = parser.parse_args()
    inputs: list[tuple[str, str, int, int, Path]] = []  # (kind, name, count, MB, run folder)
    times: dict[str, list[float]] = {}
    peaks: dict[str, float] = {}
    codes: dict[str, int] = {}
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        for columns in arguments.columns:
            run = root / f"csv{columns}"
            run.mkdir()
            size = write_csv(run, columns, arguments.rows)
            inputs.append(("csv", f"CSV {columns} columns", columns, size, run))
        if arguments.jsonl_keys:
            run = root / "jsonl"
            run.mkdir()
            size = write_sparse_jsonl(run, arguments.jsonl_keys)
            name = f"JSONL {arguments.jsonl_keys} keys"
            inputs.append(("jsonl", name, arguments.jsonl_keys, size, run))
        for tensors in arguments.tensors:
            run = root / f"tensors{tensors}"
            run.mkdir()
            size = write_many_tensors(run, tensors)
            inputs.append(("tensors", f"safetensors {tensors} tensors", tensors, size, run))
        for _ in range(arguments.repeats):  # interleaved: every input once per round
            for _kind, name, _count, _size, run in inputs:
                seconds, peak, code = timed_analyze(run, root / "out")
                times.setdefault(name, []).append(seconds)
                peaks[name], codes[name] = max(peaks.get(name, 0.0), peak), code
    median = {name: statistics.median(values) for name, values in times.items()}
    print(f"{'input':<32}{'MB':>8}{'seconds':>10}{'10x ratio':>11}{'peak MB*':>10}{'exit':>6}")
    for kind, name, count, size, _run in inputs:
        tenth = next((n for k, n, c, _s, _r in inputs if k == kind and c * 10 == count), None)
        ratio = f"{median[name] / median[tenth]:.2f}" if tenth else "-"
        print(
            f"{name:<32}{size / 1e6:>8.1f}{median[name]:>10.1f}{ratio:>11}"
            f"{peaks[name]:>10.0f}{codes[name]:>6}"
        )
    print("10x ratio: time / time of the same kind at a tenth of the count (goal <= 12)")
    print("* peak resident memory of the largest child so far (getrusage)")


if __name__ == "__main__":
    main()
