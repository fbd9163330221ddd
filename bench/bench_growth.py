"""Benchmark: cost against the number of tensors and of CSV columns, startup excluded (issue 15).

    python bench/bench_growth.py                           # 100k / 1M tensors, 800 / 8,000 columns
    python bench/bench_growth.py --tensors 10000 100000 --columns 800 8000 --repeats 3

Goal: 10x the count costs at most 12x the time ("10x ratio" below). Each input is analyzed in a
fresh child that first analyzes a 3-row CSV (imports, first calls: the fixed startup, printed
apart) and then times, on the input:

* analyze  — tscope.analyze(run folder): the whole analysis a user gets (the checkpoint layers
             table covers the first MAX_TENSORS_PER_CHECKPOINT tensors by name; the file's
             header is read whole);
* scan     — for safetensors files, also the per-tensor statistics of *every* tensor
             (safetensors_scan.scan_safetensors), uncapped.

Files: checkpoint-100/model.safetensors of N fp32 tensors of 4 elements (the many-small-tensors
case), and metrics.csv with N columns × 20 rows (bench_wide_tables' writers). The machine's load
is printed next to every number. Numbers only: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_wide_tables import write_csv, write_many_tensors

CHILD = r"""
import json, sys, time
from pathlib import Path
start = time.perf_counter()
import tscope
warm, run, kind = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
tscope.analyze(warm)
fixed = time.perf_counter() - start
begin = time.perf_counter()
tscope.analyze(run)
result = {"fixed": fixed, "analyze": time.perf_counter() - begin}
if kind == "tensors":
    from tscope.ingest.checkpoints.stats.safetensors_scan import scan_safetensors
    path = run / "checkpoint-100" / "model.safetensors"
    begin = time.perf_counter()
    result["tensors"] = sum(1 for _ in scan_safetensors(path, str(path)))
    result["scan"] = time.perf_counter() - begin
print(json.dumps(result))
"""


def load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"load {one:.1f} {five:.1f} {fifteen:.1f}"


def measure(warm: Path, run: Path, kind: str) -> dict[str, float]:
    completed = subprocess.run(
        [sys.executable, "-c", CHILD, str(warm), str(run), kind],
        capture_output=True,
        text=True,
        check=True,
    )
    result: dict[str, float] = json.loads(completed.stdout.strip().splitlines()[-1])
    result["load"] = os.getloadavg()[0]
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tensors", type=int, nargs="*", default=[100_000, 1_000_000])
    parser.add_argument("--columns", type=int, nargs="*", default=[800, 8000])
    parser.add_argument("--rows", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=1)
    arguments = parser.parse_args()
    print(f"start: {load()}, {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as scratch:
        root = Path(scratch)
        warm = root / "warm"
        warm.mkdir()
        (warm / "metrics.csv").write_text("step,loss\n1,3.0\n2,2.9\n3,2.8\n")
        inputs: list[tuple[str, int, Path]] = []
        for columns in arguments.columns:
            run = root / f"csv{columns}"
            run.mkdir()
            write_csv(run, columns, arguments.rows)
            inputs.append(("columns", columns, run))
        for tensors in arguments.tensors:
            run = root / f"tensors{tensors}"
            run.mkdir()
            write_many_tensors(run, tensors)
            inputs.append(("tensors", tensors, run))
        results: dict[tuple[str, int], list[dict[str, float]]] = {}
        for _ in range(arguments.repeats):  # interleaved: every input once per round
            for kind, count, run in inputs:
                results.setdefault((kind, count), []).append(measure(warm, run, kind))
    median = statistics.median
    print(f"end: {load()}; medians of {arguments.repeats} round(s)")
    for kind, count, _run in inputs:
        rows = results[(kind, count)]
        line = f"{kind:<8}{count:>10,}"
        for measure_name in ("analyze", "scan"):
            if measure_name not in rows[0]:
                continue
            seconds = median([r[measure_name] for r in rows])
            tenth = results.get((kind, count // 10)) if count % 10 == 0 else None
            ratio = "-"
            if tenth:
                ratio = f"{seconds / median([r[measure_name] for r in tenth]):.2f}"
            line += f"   {measure_name} {seconds:8.2f} s (10x ratio {ratio:>5})"
        fixed = median([r["fixed"] for r in rows])
        loads = [r["load"] for r in rows]
        print(f"{line}   fixed startup {fixed:6.2f} s   load {min(loads):.1f}-{max(loads):.1f}")
    print("10x ratio: time / time of the same kind at a tenth of the count (goal <= 12)")


if __name__ == "__main__":
    main()
