"""`tscope cluster` on a large synthetic sweep: time, and how it grows with the number of runs.

    .venv/bin/python bench/bench_cluster.py             # 250, 500, 1000 runs x 10,000 steps
    .venv/bin/python bench/bench_cluster.py --runs 100  # a quick look

Goal (issue 5): 1,000 runs x 10,000 steps in under 60 s on 2 cores, growing linearly with the
number of runs. Each run is a metrics.csv (step, loss, grad_norm, learning_rate); a third of the
runs blow up at a high learning rate.
The baseline, measured in the same run, is reading every CSV with pandas (the floor for any tool
that looks at all the data). CPU seconds (this process and its finished workers) are printed
beside the wall time: on this 2-core machine shared with other work, six identical 100-run
calls took 9.2-20.8 s wall at load 4.6-11 but 9.0-10.1 s of CPU (2026-12-02). Prints numbers;
asserts nothing about time.
"""

from __future__ import annotations

import argparse
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
import pandas as pd

from tscope.cluster_pipeline import cluster

STEPS = 10_000


def write_runs(root: Path, count: int, seed: int = 0) -> None:
    rng = np.random.default_rng(seed)
    steps = np.arange(1, STEPS + 1)
    for index in range(count):
        hot = index % 3 == 0
        peak_lr = float(rng.choice([3e-3, 6e-3])) if hot else float(rng.choice([3e-4, 6e-4]))
        lr = peak_lr * np.minimum(steps / 500, 1.0)
        loss = (3.0 + 7.0 * np.exp(-steps / 800)) * (1 + 0.02 * rng.standard_normal(STEPS))
        grad = 1.0 + 0.1 * rng.standard_normal(STEPS)
        if hot:
            at = int(rng.integers(2_000, 8_000))
            loss[at:] *= np.linspace(8.0, 80.0, STEPS - at)
            grad[at - 20 :] *= 30.0
            loss[min(at + 500, STEPS - 1) :] = np.nan
        folder = root / f"run{index:04d}_lr{peak_lr:g}"
        folder.mkdir(parents=True)
        pd.DataFrame({"step": steps, "loss": loss, "grad_norm": grad, "learning_rate": lr}).to_csv(
            folder / "metrics.csv", index=False, na_rep="nan"
        )


def plain_read(root: Path) -> tuple[float, float]:
    """(wall, CPU) seconds to read every run's CSV with pandas."""
    start, cpu = time.perf_counter(), cpu_seconds()
    for file in sorted(root.glob("*/metrics.csv")):
        pd.read_csv(file)
    return time.perf_counter() - start, cpu_seconds() - cpu


def cpu_seconds() -> float:
    """User + system CPU of this process and of its children that have ended (the pool's
    workers, joined when cluster() returns)."""
    own, children = (
        resource.getrusage(resource.RUSAGE_SELF),
        resource.getrusage(resource.RUSAGE_CHILDREN),
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, nargs="*", default=[250, 500, 1000])
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument(
        "--numpy-too",
        action="store_true",
        help="also time each size with the compiled detector loops off (TSCOPE_COMPILED_LOOPS=0)",
    )
    args = parser.parse_args()
    work = Path(tempfile.mkdtemp(prefix="tscope-bench-cluster-"))
    try:
        largest = max(args.runs)
        write_runs(work / "all", largest)
        names = sorted(p.name for p in (work / "all").iterdir())
        per_run = {}
        for count in sorted(args.runs):
            runs = work / f"runs{count}"
            runs.mkdir()
            for name in names[:count]:
                (runs / name).symlink_to(work / "all" / name, target_is_directory=True)
            baseline, baseline_cpu = plain_read(runs)
            start, cpu = time.perf_counter(), cpu_seconds()
            report = cluster(runs, work / f"out{count}", jobs=args.jobs, follow_run_links=True)
            cold, cold_cpu = time.perf_counter() - start, cpu_seconds() - cpu
            start = time.perf_counter()
            cluster(runs, work / f"out{count}", jobs=args.jobs, follow_run_links=True)
            warm = time.perf_counter() - start
            per_run[count] = cold / count
            unstable = sum(p.status == "unstable" for p in report.profiles)
            print(
                f"{count:>5} runs x {STEPS:,} steps: cold {cold:6.1f} s "
                f"({cold / baseline:4.1f}x reading the CSVs: {baseline:.1f} s), "
                f"cached {warm:5.1f} s; {unstable} unstable, {len(report.clusters)} clusters; "
                f"load {os.getloadavg()[0]:.1f}\n{'':>5} CPU {cold_cpu:6.1f} s, "
                f"{cold_cpu / count * 1000:.0f} ms per run ({cold_cpu / baseline_cpu:4.1f}x "
                f"pandas' {baseline_cpu:.2f} s)"
            )
            if args.numpy_too:
                os.environ["TSCOPE_COMPILED_LOOPS"] = "0"
                start = time.perf_counter()
                cluster(runs, work / f"numpy{count}", jobs=args.jobs, follow_run_links=True)
                numpy_cold = time.perf_counter() - start
                del os.environ["TSCOPE_COMPILED_LOOPS"]
                same = sorted((work / f"numpy{count}").rglob("case.json")) and all(
                    case.read_bytes()
                    == (
                        work / f"out{count}" / case.relative_to(work / f"numpy{count}")
                    ).read_bytes()
                    for case in (work / f"numpy{count}").rglob("case.json")
                )
                print(
                    f"{'':>5} numpy detector loops: cold {numpy_cold:6.1f} s "
                    f"({numpy_cold / cold:4.1f}x the compiled run); every run's case.json "
                    f"identical: {bool(same)}; load {os.getloadavg()[0]:.1f}"
                )
        smallest, biggest = min(per_run), max(per_run)
        print(
            f"time per run {per_run[smallest] * 1000:.0f} ms at {smallest} runs, "
            f"{per_run[biggest] * 1000:.0f} ms at {biggest} runs "
            f"(linear growth = equal); goal: 1000 runs < 60 s"
        )
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
