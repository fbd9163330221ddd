"""The numpy rolling statistics that replaced pandas on short series give pandas' numbers, bit
for bit (sign of zero included): a logs-only analyze no longer imports pandas (issue 15), and the
cases must not change."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from tscope.analyzers.baseline import _sorted_windows_median, rolling_median
from tscope.analyzers.detectors.spike_score import (
    SPIKE_SCORE_MIN_POINTS,
    _expanding_mean_std,
    rolling_mean_std,
)


def _same(expected: np.ndarray, got: np.ndarray) -> bool:
    return bool(
        np.array_equal(expected, got, equal_nan=True)
        and np.array_equal(np.signbit(expected), np.signbit(got))
    )


def _series(rng: np.random.Generator, size: int, kind: int) -> np.ndarray:
    if kind == 0:  # ties, both zeros: the order equal values keep decides the median's sign
        values = rng.choice([0.0, -0.0, 1.0, -1.0, 2.5, 1e-300], size)
    elif kind == 1:  # nearly constant: pandas' repeated-value corrections
        values = np.full(size, 3.3) + (rng.random(size) < 0.05) * 1e-12
    elif kind == 2:  # all negative, large
        values = -np.abs(rng.normal(size=size)) * 1e8
    elif kind == 3:  # a decaying loss curve
        values = np.exp(-np.arange(size) / 50.0) + rng.normal(size=size) * 1e-3
    else:
        values = rng.normal(size=size) * 10.0 ** int(rng.integers(-10, 10))
    values = values.astype(np.float64)
    values[rng.random(size) < 0.1] = np.nan
    return values


def test_sorted_windows_median_is_pandas_rolling_median() -> None:
    rng = np.random.default_rng(0)
    for trial in range(1500):
        size, window = int(rng.integers(0, 120)), int(rng.integers(1, 60))
        min_periods = int(rng.integers(0, window + 1))
        values = _series(rng, size, trial % 5)
        values[rng.random(size) < 0.05] = np.inf  # left out by pandas' rolling too
        values[rng.random(size) < 0.05] = -np.inf
        expected = pd.Series(values).rolling(window, min_periods=min_periods).median().to_numpy()
        assert _same(expected, _sorted_windows_median(values, window, min_periods)), trial
        assert _same(expected, rolling_median(values, window, min_periods)), trial


def test_expanding_mean_std_is_pandas_rolling_mean_std() -> None:
    rng = np.random.default_rng(1)
    for trial in range(1500):
        size, min_periods = int(rng.integers(0, 300)), int(rng.integers(0, 30))
        values = _series(rng, size, trial % 5)
        window = max(size, min_periods, 1) + int(rng.integers(0, 5))
        rolling = pd.Series(values).rolling(window, min_periods=min_periods)
        means, stds = _expanding_mean_std(values, min_periods)
        assert _same(rolling.mean().to_numpy(), means), trial
        assert _same(rolling.std().to_numpy(), stds), trial


@pytest.mark.parametrize("size", [0, 5, 40, 300, 1000, 1001, 2500])
def test_rolling_mean_std_is_pandas_on_both_sides_of_the_window(size: int) -> None:
    values = _series(np.random.default_rng(size), size, 3)
    values[::97] = np.inf
    finite = pd.Series(np.where(np.isfinite(values), values, np.nan))
    rolling = finite.rolling(1000, min_periods=SPIKE_SCORE_MIN_POINTS)
    std = rolling.std().shift(1).to_numpy()
    mean, got_std = rolling_mean_std(values, 1000)
    assert _same(rolling.mean().shift(1).to_numpy(), mean)
    assert _same(np.where(std > 0, std, np.nan), got_std)
