"""Robust trailing baselines shared by the detectors and explainers.

Everything here works on one series at a time: `values` is a float64 array in step order, NaN/Inf
kept. Windows are counted in points, not steps, so sparse series (eval every 500 steps) work too.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

import numpy as np

from tscope.analyzers.detectors.compiled_loops import (
    COMPILED_MIN_POINTS,
    compiled_ranked_rolling_median,
    compiled_rolling_median,
)

# 1.4826 * MAD estimates sigma for Gaussian noise (the constant the contract defines magnitude by).
MAD_TO_SIGMA = 1.4826
# Trailing window for the robust baseline: long enough to average out per-batch noise, short
# enough to follow the normal downward trend of a loss curve. Measured on the fixtures and the
# real logs in shared/realdata: 32–64 points give the same alarms; 50 is the middle.
BASELINE_WINDOW_POINTS = 50
# A baseline needs this many earlier finite points before any alarm can be raised.
MIN_BASELINE_POINTS = 8
# The compiled rolling median keeps the window as a sorted buffer, O(window) per point: right for
# the baselines' 50 points, quadratic for the explainers' windows of 10% of a long series (25,000
# points of a 250,000-point series: 67 s at load 16). Longer windows take the rank-counting loop,
# O(log n) per point: over 10,000 points (CPU, best of 7, 2026-12-02) the buffer takes 0.6 ms at
# window 50, 1.5 ms at 200, 2.9 ms at 500 and 4.9 ms at 1,000 (grad_norm's and plateau's windows
# on a 10,000-step run), the rank loop ~1.6 ms at every window: it wins above ~200.
SORTED_BUFFER_MAX_WINDOW = 200
# rolling_median sorts every window at once (points x window floats) up to this many cells:
# 16 MB, milliseconds; longer series without numba take pandas' skiplist.
SORTED_WINDOWS_MAX_CELLS = 2_000_000


@dataclass(frozen=True)
class RobustBaseline:
    """Per point: the median and robust sigma of the points before it (the point excluded)."""

    median: np.ndarray  # (n,) NaN where there is not enough history
    sigma: np.ndarray  # (n,) 1.4826 * rolling median absolute deviation, floored

    def zscores(self, values: np.ndarray) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            z: np.ndarray = (values - self.median) / self.sigma
        return z


# Results computed from read-only arrays (Run.series hands out read-only views of its cache, the
# same array object on every call), kept while the array lives: the detectors, the story and the
# cluster's aligned view each asked for the gradient norm's baseline again (two rolling medians
# over the whole series each time; seconds on a 1,000,000-scalar log), and six rules smooth the
# same loss curve. A writeable array may change, so it is computed afresh. Keyed by id() with a
# weak reference to check it is the same array (ndarrays are not hashable).
_PER_ARRAY: dict[tuple[int, str, int], tuple[weakref.ref[np.ndarray], Any]] = {}
Computed = TypeVar("Computed")


def per_read_only_array(
    values: np.ndarray, name: str, window: int, compute: Callable[[], Computed]
) -> Computed:
    """compute(), kept per (read-only array, name, window) while the array lives; the arrays it
    returns must be made read-only by the caller (they are shared from then on)."""
    if values.flags.writeable:
        return compute()
    key = (id(values), name, window)
    known = _PER_ARRAY.get(key)
    if known is not None and known[0]() is values:
        result: Computed = known[1]
        return result
    result = compute()
    _PER_ARRAY[key] = (weakref.ref(values, lambda _: _PER_ARRAY.pop(key, None)), result)
    return result


def robust_baseline(values: np.ndarray, window: int = BASELINE_WINDOW_POINTS) -> RobustBaseline:
    """Trailing rolling median and robust sigma, both excluding the current point.

    Sigma comes from the first differences (1.4826 · median|Δx| / √2), which a trend does not
    inflate: a loss still falling fast in a 100-step run keeps a small sigma, so a spike there is
    still a spike. Both are rolling medians (rolling_median): under a second for 10^6 points.
    """
    return per_read_only_array(
        values, "robust_baseline", window, lambda: _shared(_robust_baseline(values, window))
    )


def _shared(baseline: RobustBaseline) -> RobustBaseline:
    baseline.median.flags.writeable = False
    baseline.sigma.flags.writeable = False
    return baseline


def _robust_baseline(values: np.ndarray, window: int) -> RobustBaseline:
    finite = np.where(np.isfinite(values), values, np.nan)
    min_periods = min(MIN_BASELINE_POINTS, window)
    median_array = shifted_by_one(rolling_median(finite, window, min_periods))
    steps_abs = np.abs(np.diff(finite, prepend=np.nan))  # Series.diff().abs()
    mad_of_differences = shifted_by_one(rolling_median(steps_abs, window, min_periods))
    sigma = MAD_TO_SIGMA * mad_of_differences / np.sqrt(2.0)
    return RobustBaseline(median_array, _floor_sigma(sigma, median_array))


def rolling_median(values: np.ndarray, window: int, min_periods: int) -> np.ndarray:
    """pd.Series(values).rolling(window, min_periods=min_periods).median() as an array, the same
    numbers, sign of zero included (tests/test_compiled_loops.py, tests/test_rolling_median.py):
    the compiled loop on long series with short windows when numba is there, every window sorted
    at once with numpy on short series (pandas is not imported: a logs-only analyze's startup),
    the compiled rank-counting loop for long windows on long series (grad_norm's window is a
    tenth of the run), pandas' skiplist for the rest (no numba)."""
    if values.size >= COMPILED_MIN_POINTS:
        medians = (
            compiled_rolling_median(values, window, min_periods)
            if window <= SORTED_BUFFER_MAX_WINDOW
            else compiled_ranked_rolling_median(values, window, min_periods)
        )
        if medians is not None:
            return medians
    if values.size * window <= SORTED_WINDOWS_MAX_CELLS:
        return _sorted_windows_median(values, window, min_periods)
    medians = compiled_ranked_rolling_median(values, window, min_periods)
    if medians is not None:
        return medians
    import pandas as pd  # here: only long series without numba need it

    result: np.ndarray = (
        pd.Series(values).rolling(window, min_periods=min_periods).median().to_numpy()
    )
    return result


def _sorted_windows_median(values: np.ndarray, window: int, min_periods: int) -> np.ndarray:
    """pandas' roll_median_c on all windows at once: the median of the finite points among the
    last `window` (pandas leaves ±inf out too), NaN below min_periods. pandas keeps a skiplist
    that inserts a value after its equals and removes the first equal, so equal values (0.0 and
    -0.0) stand in the order they arrived: what a stable sort of each window gives."""
    size = values.size
    if size == 0:
        return np.empty(0, dtype=np.float64)
    finite = np.where(np.isfinite(values), values, np.nan).astype(np.float64, copy=False)
    padded = np.concatenate((np.full(window - 1, np.nan), finite))
    windows = np.lib.stride_tricks.sliding_window_view(padded, window)  # row i ends at point i
    ordered = np.sort(windows, axis=1, kind="stable")  # NaN last
    count = window - np.isnan(windows).sum(axis=1)
    rows = np.arange(size)
    middle = count // 2
    upper = ordered[rows, np.minimum(middle, window - 1)]
    lower = ordered[rows, np.maximum(middle - 1, 0)]
    medians = np.where(count % 2 == 1, upper, (upper + lower) / 2)
    medians[(count < min_periods) | (count == 0)] = np.nan
    result: np.ndarray = medians
    return result


def shifted_by_one(values: np.ndarray) -> np.ndarray:
    """Series.shift(1): each point gets its predecessor's value, the first NaN."""
    return np.concatenate((np.full(min(1, values.size), np.nan), values[:-1]))


def _floor_sigma(sigma: np.ndarray, median: np.ndarray) -> np.ndarray:
    """A perfectly flat stretch has MAD 0; floor sigma at 0.1% of the level so z stays finite."""
    floor = np.maximum(np.abs(median) * 1e-3, 1e-12)
    with np.errstate(invalid="ignore"):
        return np.where(np.isnan(sigma), np.nan, np.maximum(sigma, floor))


def difference_sigma(values: np.ndarray) -> float:
    """The noise σ of a short window (finite points, step order) from its first differences,
    1.4826 · median|Δx| / √2 like `robust_baseline`: a trend inside the window does not inflate
    it. Floored at 0.1% of the window's median so a flat stretch keeps a finite σ."""
    finite = values[np.isfinite(values)]
    if finite.size < 2:
        return float("nan")
    sigma = MAD_TO_SIGMA * median_of_finite(np.abs(np.diff(finite))) / float(np.sqrt(2.0))
    return max(sigma, abs(median_of_finite(finite)) * 1e-3, 1e-12)


def window_stats(values: np.ndarray) -> tuple[float, float]:
    """(median, robust sigma) of a window of points, ignoring non-finite ones."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return float("nan"), float("nan")
    median = median_of_finite(finite)
    sigma = MAD_TO_SIGMA * median_of_finite(np.abs(finite - median))
    return median, max(sigma, abs(median) * 1e-3, 1e-12)


def median_of_finite(values: np.ndarray) -> float:
    """np.median of a non-empty 1-D float array without NaN, bit for bit, without its ~10 µs of
    overhead (np.median's NaN check is left out: NaN must not be there).

    window_stats runs once per detector alarm, hundreds of times on a long run, and
    repeated_data's tests once per candidate stretch. Like np.median,
    partition around the middle and average the middle one or two values; the sum starts at +0.0
    as numpy's does, which turns a -0.0 median into 0.0.
    """
    middle = values.size // 2
    if values.size % 2:
        return float(0.0 + np.partition(values, middle)[middle])
    low, high = np.partition(values, (middle - 1, middle))[middle - 1 : middle + 1]
    return float((0.0 + low + high) / 2)


def ratio_above(values: Any, reference: Any, ratio: float) -> Any:
    """`values` more than `ratio`× `reference` above it, for a reference of either sign: the
    margin is (ratio − 1)·|reference|. `values > ratio * reference` flips for a negative loss
    (a Gaussian NLL's best of −1.59: every later eval, the best's equal included, is above
    1.1 × −1.59 = −1.75), and read a healthy run's flat end as a rising eval loss."""
    return values > reference + (ratio - 1.0) * np.abs(reference)


def robust_sigma(values: np.ndarray) -> float:
    """MAD_TO_SIGMA × the median absolute deviation of the finite values (NaN without any)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return float("nan")
    return float(MAD_TO_SIGMA * median_of_finite(np.abs(finite - median_of_finite(finite))))
