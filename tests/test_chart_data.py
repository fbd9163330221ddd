"""The vectorized chart bucketing gives exactly what the original per-bucket loop gave."""

from __future__ import annotations

import numpy as np
import pytest

from tscope.chart_data import bucketed


def bucketed_loop(steps: np.ndarray, values: np.ndarray, count: int) -> dict[str, list[object]]:
    """The original implementation, one bucket at a time: the reference."""
    out: dict[str, list[object]] = {"steps": [], "values": [], "min": [], "max": []}
    for bucket in np.array_split(np.arange(steps.size), count):
        chunk = values[bucket]
        finite = chunk[np.isfinite(chunk)]
        nonfinite = chunk[~np.isfinite(chunk)]
        out["steps"].append(int(steps[bucket[-1]]))
        out["values"].append(float(chunk[-1]))
        out["min"].append(float(finite.min()) if finite.size else float(nonfinite[0]))
        out["max"].append(float(nonfinite[0]) if nonfinite.size else float(finite.max()))
    return out


def same(a: dict[str, list[object]], b: dict[str, list[object]]) -> bool:
    """Equal including NaN positions and the sign of zeros (what case.json would show)."""
    return all(
        [repr(x) for x in a[key]] == [repr(y) for y in b[key]]
        for key in ("steps", "values", "min", "max")
    )


@pytest.mark.parametrize("seed", range(20))
def test_bucketed_matches_the_loop(seed: int) -> None:
    rng = np.random.default_rng(seed)
    count = int(rng.choice([7, 100, 1200]))
    n = int(rng.integers(count + 1, 6 * count))
    steps = np.cumsum(rng.integers(1, 5, n)).astype(np.int64)
    values = rng.normal(3.0, 1.0, n)
    if seed % 4 == 1:
        values = rng.choice([0.0, -0.0, 1.0, -1.0], n)  # zeros of both signs tie at min/max
    holes = rng.random(n) < rng.choice([0.0, 0.01, 0.3, 0.9])
    values[holes] = rng.choice([np.nan, np.inf, -np.inf], int(holes.sum()))
    if seed % 5 == 2:
        values[: n // 2] = np.nan  # whole buckets without a finite value
    assert same(bucketed(steps, values, count), bucketed_loop(steps, values, count))
