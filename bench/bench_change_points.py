"""Change points on generic series: tscope's detectors vs ruptures' Binseg with a BIC penalty.

    .venv/bin/python bench/bench_change_points.py            # dev seeds 0-39 and test seeds 100-139

Synthetic series with known breaks (600 points, 1-4 breaks at least 40 points apart, unit
Gaussian noise): piecewise constant (each step ±1.5-4σ) and continuous piecewise linear (each
kink changes the slope by ±0.1-0.3σ per point). Score: F1 with a margin of 5 points (a predicted
break matches at most one true break within 5 points). Compared side by side:

    generic   tscope.analyzers.detectors.generic_segments.generic_change_points (PELT, BIC,
              constant or linear model chosen by BIC)
    wired     series_change_points, what analyzers/detect.py runs on non-loss series (the same,
              on the log of a positive series, each point clipped to 3σ around its rolling median)
    pelt      tscope's loss-curve PeltDetector (bucket medians, 3σ minimum shift)
    binseg    ruptures.Binseg, model "l2", penalty 2σ² log n (BIC for a mean shift)
    binseg_linear  ruptures.Binseg, model "clinear", penalty 3σ² log n

σ is the same difference-based estimate for every method. tests/test_generic_segments.py asserts
the test-split comparison.

Real series (`--real`): the gradient norms of the healthy real Trainer and sweep fixture runs
(fixtures/data), each with a persistent level step ×1.5–×3 planted at a random point of its second
half (seeds 0–19 per run). Scored: recall of the planted step within 5 points, and the change
points found on the unplanted series, for the pipeline's generic-series path
(detect._generic_change_points) and for what it replaced there (the loss-curve CUSUM + PELT
change points, detect._change_points).
"""

from __future__ import annotations

import itertools
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

LENGTH = 600
MARGIN = 5
DEV_SEEDS = range(40)
TEST_SEEDS = range(100, 140)


def synthetic(kind: str, seed: int, n: int = LENGTH) -> tuple[np.ndarray, list[int]]:
    """(series, true break indices: first point of each new segment)."""
    rng = np.random.default_rng(seed)
    count = int(rng.integers(1, 5))
    while True:
        breaks = np.sort(rng.choice(np.arange(40, n - 40), count, replace=False))
        if np.all(np.diff(np.r_[0, breaks, n]) >= 40):
            break
    x = np.zeros(n)
    bounds = [0, *breaks.tolist(), n]
    level, slope = 0.0, float(rng.uniform(-0.05, 0.05))
    for left, right in itertools.pairwise(bounds):
        if kind == "constant":
            x[left:right] = level
            level += float(rng.choice([-1, 1]) * rng.uniform(1.5, 4.0))
        else:
            x[left:right] = level + slope * np.arange(right - left)
            level = x[right - 1] + slope
            slope += float(rng.choice([-1, 1]) * rng.uniform(0.1, 0.3))
    return x + rng.standard_normal(n), [int(b) for b in breaks]


def f1(predicted: list[int], true: list[int], margin: int = MARGIN) -> float:
    matched: set[int] = set()
    hits = 0
    for point in predicted:
        near = [t for t in true if abs(t - point) <= margin and t not in matched]
        if near:
            matched.add(min(near, key=lambda t: abs(t - point)))
            hits += 1
    if not predicted and not true:
        return 1.0
    if hits == 0:
        return 0.0
    precision, recall = hits / len(predicted), hits / len(true)
    return 2 * precision * recall / (precision + recall)


def methods() -> dict[str, object]:
    import ruptures

    from tscope.analyzers.baseline import robust_baseline
    from tscope.analyzers.detectors.generic_segments import (
        generic_change_points,
        series_change_points,
    )
    from tscope.analyzers.detectors.pelt import PeltDetector, _difference_sigma

    def bic(model: str, parameters: float, min_size: int):  # type: ignore[no-untyped-def]
        def run(x: np.ndarray) -> list[int]:
            penalty = parameters * _difference_sigma(x) ** 2 * np.log(x.size)
            fitted = ruptures.Binseg(model=model, min_size=min_size).fit(x)
            return [int(b) for b in fitted.predict(pen=penalty)[:-1]]

        return run

    return {
        "generic": lambda x: generic_change_points(x)[0],
        "wired": lambda x: series_change_points(x)[0],
        "pelt": lambda x: sorted(
            {s.index for s in PeltDetector().detect(x, robust_baseline(x)).shifts}
        ),
        "binseg": bic("l2", 2.0, 2),
        "binseg_linear": bic("clinear", 3.0, 3),
    }


def score(seeds: range) -> dict[str, dict[str, float]]:
    """Mean F1 per series kind and method over `seeds`."""
    table: dict[str, dict[str, float]] = {}
    runners = methods()
    for kind in ("constant", "linear"):
        series = [synthetic(kind, seed) for seed in seeds]
        table[kind] = {
            name: float(np.mean([f1(run(x), true) for x, true in series]))  # type: ignore[operator]
            for name, run in runners.items()
        }
    return table


HEALTHY_FIXTURES = (
    "trainer/stable",
    "trainer/stable_long_logging",
    "sweep/lr0.001_seed1234",
    "sweep/lr0.002_seed7",
    "sweep/lr0.003_seed1234",
    "sweep/lr0.005_seed7",
)


def real_series() -> list[tuple[str, np.ndarray, np.ndarray]]:
    from tscope.model.metric_names import GRAD_NORM
    from tscope.pipeline import analyze_run

    out = []
    for name in HEALTHY_FIXTURES:
        _, run = analyze_run(ROOT / "fixtures" / "data" / name, read_weights=False)
        steps, values = run.series(GRAD_NORM)
        finite = np.isfinite(values)
        out.append((name, steps[finite], values[finite]))
    return out


def real_methods() -> dict[str, object]:
    from tscope.analyzers import detect as pipeline_detect
    from tscope.analyzers.baseline import robust_baseline

    def previous(steps: np.ndarray, x: np.ndarray) -> list[int]:
        detections = [d.detect(x, robust_baseline(x)) for d in pipeline_detect.DETECTORS]
        return [cp.step for cp in pipeline_detect._change_points("g", steps, detections)]

    def generic(steps: np.ndarray, x: np.ndarray) -> list[int]:
        return [cp.step for cp in pipeline_detect._generic_change_points("g", steps, x)]

    return {"generic (wired)": generic, "cusum+pelt (before)": previous}


def score_real(seeds: range = range(20)) -> dict[str, dict[str, float]]:
    table: dict[str, dict[str, float]] = {}
    series = real_series()
    for method, find in real_methods().items():
        hits, planted, found_healthy = 0, 0, 0
        for _, steps, x in series:
            found_healthy += len(find(steps, x))  # type: ignore[operator]
            for seed in seeds:
                rng = np.random.default_rng(seed)
                at = int(rng.integers(x.size // 2, x.size - 10))
                factor = float(rng.uniform(1.5, 3.0))
                planted_x = x.copy()
                planted_x[at:] *= factor
                steps_found = find(steps, planted_x)  # type: ignore[operator]
                position = {int(s): i for i, s in enumerate(steps)}
                hits += any(abs(position[int(s)] - at) <= MARGIN for s in steps_found)
                planted += 1
        table[method] = {
            "recall": hits / planted,
            "per_healthy_series": found_healthy / len(series),
        }
    return table


def main() -> int:
    if "--real" in sys.argv[1:]:
        for method, row in score_real().items():
            print(
                f"real grad norms, planted step ×1.5–3: {method:20} recall@{MARGIN} "
                f"{row['recall']:.3f}; change points per unplanted series "
                f"{row['per_healthy_series']:.1f}"
            )
        return 0
    for split, seeds in (("dev", DEV_SEEDS), ("test", TEST_SEEDS)):
        for kind, row in score(seeds).items():
            shown = "  ".join(f"{name} {value:.3f}" for name, value in row.items())
            print(f"{split:4} {kind:8} F1@{MARGIN}: {shown}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
