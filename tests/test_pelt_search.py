"""Our numpy PELT gives exactly ruptures.Pelt's breakpoints (ruptures is the reference here)."""

from __future__ import annotations

import numpy as np
import pytest
import ruptures

from tscope.analyzers.detectors.pelt import PELT_MAX_POINTS, _bucket_medians
from tscope.analyzers.detectors.pelt_search import pelt_l2_breakpoints

KINDS = ("noise", "level_shifts", "trend", "spikes", "constant_stretches", "quantised", "loss")


def reference(values: np.ndarray, min_size: int, penalty: float) -> list[int]:
    algorithm = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(values)
    breakpoints: list[int] = algorithm.predict(pen=penalty)
    return breakpoints


def series(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    noise = rng.normal(0.0, 1.0, n)
    if kind == "noise":
        return noise
    if kind == "level_shifts":
        levels = rng.normal(0.0, 3.0, int(rng.integers(2, 8)))
        return np.repeat(levels, -(-n // levels.size))[:n] + rng.uniform(0.05, 1.0) * noise
    if kind == "trend":
        return 5.0 + rng.normal(0, 0.05) * np.arange(n) + 0.3 * noise
    if kind == "spikes":
        values = 3.0 + 0.1 * noise
        values[rng.integers(0, n, 4)] += rng.uniform(1.0, 20.0, 4)
        return values
    if kind == "constant_stretches":
        # Exact repeats make exact ties between candidate partitions.
        values = np.repeat(rng.integers(0, 3, 6).astype(float), -(-n // 6))[:n]
        noisy = rng.random(n) < 0.2
        values[noisy] += 0.01 * noise[noisy]
        return values
    if kind == "quantised":
        return np.round(2.0 * noise) / 2.0  # rounded values: many equal segment costs
    # A loss curve far from zero, as the detector sees it (bucket medians of a decaying loss).
    steps = np.arange(n)
    return 3.0 + 7.0 * np.exp(-steps / (n / 6)) + 0.01 * noise


# ruptures takes ~0.1 s per series of this size: 70 cases keep this file to a few seconds.
@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("kind", KINDS)
def test_same_breakpoints_as_ruptures(kind: str, seed: int) -> None:
    rng = np.random.default_rng([KINDS.index(kind), seed])
    n = int(rng.integers(30, 301))
    values = series(kind, n, rng)
    min_size = int(rng.choice([1, 2, 3, 5, 10, max(2, n // 20)]))
    # Penalties around the detector's 4·σ²·log n, from keep-everything to merge-everything.
    noise_variance = float(np.var(np.diff(values))) / 2 or 1.0
    penalty = float(rng.choice([0.5, 1.0, 4.0, 16.0, 40.0])) * noise_variance * np.log(n)
    assert pelt_l2_breakpoints(values, min_size, penalty) == reference(values, min_size, penalty)


@pytest.mark.parametrize(
    ("values", "min_size", "penalty"),
    [
        (np.ones(50), 5, 1.0),  # every candidate ties
        (np.r_[np.zeros(40), np.ones(40)], 4, 0.0),  # zero penalty
        (np.r_[np.zeros(30), 5 * np.ones(30)], 30, 0.1),  # min_size = half the series
        (np.arange(40, dtype=float), 40, 1.0),  # min_size = the whole series
        (np.r_[np.zeros(25), np.ones(20)], 30, 0.1),  # a start with no solved prefix at the end
        (np.random.default_rng(7).normal(0, 1, 120), 0, 0.5),  # min_size below ruptures' 1
    ],
)
def test_edge_cases_match_ruptures(values: np.ndarray, min_size: int, penalty: float) -> None:
    assert pelt_l2_breakpoints(values, min_size, penalty) == reference(values, min_size, penalty)


# Overflowing variances warn inside ruptures (and its exact replay here) as they always did.
@pytest.mark.filterwarnings("ignore::RuntimeWarning")
@pytest.mark.parametrize("scale", [1e150, 1e200])
def test_values_near_the_float_limit_take_the_exact_path(scale: float) -> None:
    # The rounding bound overflows here, so every decision is made on ruptures' own arithmetic.
    rng = np.random.default_rng(3)
    values = scale * np.r_[rng.normal(0, 1, 60), 8 + rng.normal(0, 1, 60)]
    for penalty in (0.0, 1.0, 1e300):
        assert pelt_l2_breakpoints(values, 6, penalty) == reference(values, 6, penalty)


@pytest.mark.parametrize(
    ("values", "min_size", "penalty"),
    [
        (np.ones(10), 11, 1.0),
        (np.array([1.0, np.nan, 2.0]), 1, 1.0),
        (np.ones((5, 2)), 1, 1.0),
        (np.ones(10), 2, -1.0),
    ],
)
def test_rejects_what_ruptures_cannot_segment(
    values: np.ndarray, min_size: int, penalty: float
) -> None:
    with pytest.raises(ValueError):
        pelt_l2_breakpoints(values, min_size, penalty)


@pytest.mark.parametrize("seed", range(6))
def test_bucket_medians_are_np_array_split_medians(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(30, 5000))
    values = np.round(rng.normal(0.0, 1.0, n), int(rng.integers(0, 3)))  # ties and -0.0
    values[rng.random(n) < 0.05] = np.nan
    finite_index = np.flatnonzero(np.isfinite(values))
    buckets = np.array_split(finite_index, min(PELT_MAX_POINTS, finite_index.size))
    reduced, first_index = _bucket_medians(values, finite_index)
    expected = np.array([np.median(values[bucket]) for bucket in buckets])
    assert reduced.tobytes() == expected.tobytes()  # bit for bit, signed zeros included
    assert first_index.tolist() == [int(bucket[0]) for bucket in buckets]
