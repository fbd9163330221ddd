"""All detectors on a long loss series: time, and how it grows with 10× the data.

    .venv/bin/python bench/bench_detectors.py

Goal (issue 2): 1,000,000 steps under 2 s on 2 cores; 10× the data costs at most 12× the time.
Prints numbers; asserts nothing about time.
"""

from __future__ import annotations

import time

import numpy as np

from tscope.analyzers.baseline import robust_baseline
from tscope.analyzers.detect import DETECTORS
from tscope.analyzers.detectors.merge import merge_alarms


def loss_series(points: int, seed: int = 0) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(points, dtype=float)
    values = (2.5 + 2.0 * np.exp(-t / (points / 8))) * (1 + 0.02 * rng.standard_normal(points))
    values[rng.choice(points, 5, replace=False)] *= 2.0  # a few planted spikes
    return values


def time_all_detectors(values: np.ndarray) -> float:
    start = time.perf_counter()
    baseline = robust_baseline(values)
    merge_alarms(values, [detector.detect(values, baseline) for detector in DETECTORS])
    return time.perf_counter() - start


def main() -> None:
    time_all_detectors(loss_series(10_000))  # warm-up: imports (ruptures) and caches
    results = {}
    for points in (100_000, 1_000_000):
        results[points] = min(time_all_detectors(loss_series(points)) for _ in range(3))
        print(f"{points:>9,} points: {results[points]:.3f} s (best of 3)")
    ratio = results[1_000_000] / results[100_000]
    print(f"10x data -> {ratio:.1f}x time (goal <= 12x); 1M points goal < 2 s")


if __name__ == "__main__":
    main()
