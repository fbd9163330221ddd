"""OLMo 2's spike score: points ≥ 7σ from the rolling mean of the previous 1,000 values."""

from __future__ import annotations

import math

import numpy as np

from tscope.analyzers.baseline import RobustBaseline, shifted_by_one
from tscope.analyzers.detectors.base import Detection
from tscope.analyzers.detectors.compiled_loops import compiled_rolling_mean_std

# OLMo 2 (arXiv 2501.00656, §3): "values at least seven standard deviations away from a rolling
# average of the last 1,000 values"; ProRes applies it over the previous 1,000, excluding the point.
SPIKE_SCORE_SIGMA = 7.0
SPIKE_SCORE_WINDOW = 1000
# A rolling std over fewer points than this is too noisy to judge 7σ (short runs still work).
SPIKE_SCORE_MIN_POINTS = 20


class SpikeScoreDetector:
    name = "spike_score"

    def __init__(
        self, sigma: float = SPIKE_SCORE_SIGMA, window_points: int = SPIKE_SCORE_WINDOW
    ) -> None:
        self.sigma = sigma
        self.window_points = window_points

    def detect(
        self, values: np.ndarray, baseline: RobustBaseline, with_shifts: bool = True
    ) -> Detection:
        mean, std = rolling_mean_std(values, self.window_points)
        with np.errstate(invalid="ignore", divide="ignore"):
            z = (values - mean) / std
            above = (z >= self.sigma) & np.isfinite(mean)
        alarming = np.flatnonzero(above)
        return Detection(self.name, index=alarming, score=z[alarming])


def rolling_mean_std(values: np.ndarray, window_points: int) -> tuple[np.ndarray, np.ndarray]:
    """Mean and std of the previous `window_points` finite values (the current one excluded):
    pandas' rolling mean and std, the same numbers. A series no longer than the window (every
    run shorter than 1,000 points) takes `_expanding_mean_std`, a longer one the compiled loop
    (compiled_loops.compiled_rolling_mean_std): neither imports pandas, which only a longer
    series without numba still needs (importing pandas was ~0.5 s of a 1,000,000-scalar
    event file's analyze, its rolling mean and std ~0.2 s more)."""
    finite = np.where(np.isfinite(values), values, np.nan)
    compiled = None
    if finite.size > window_points:
        compiled = compiled_rolling_mean_std(finite, window_points, SPIKE_SCORE_MIN_POINTS)
    if compiled is not None:
        mean, std = compiled
    elif finite.size <= window_points:
        mean, std = _expanding_mean_std(finite, SPIKE_SCORE_MIN_POINTS)
    else:
        import pandas as pd  # here: only long series without numba need it

        rolling = pd.Series(finite).rolling(window_points, min_periods=SPIKE_SCORE_MIN_POINTS)
        mean = rolling.mean().to_numpy()
        std = rolling.std().to_numpy()
    mean, std = shifted_by_one(mean), shifted_by_one(std)
    return mean, np.where(std > 0, std, np.nan)


def _expanding_mean_std(values: np.ndarray, min_periods: int) -> tuple[np.ndarray, np.ndarray]:
    """pd.Series(values).rolling(w, min_periods).mean() and .std() for w >= len(values), where
    each window holds every point so far: the same IEEE operations in the same order as pandas'
    roll_mean (Kahan-compensated sum, the sign and repeated-value corrections) and roll_var
    (Welford's update with a Kahan-compensated mean, ddof 1, a negative variance's root 0).
    tests/test_rolling_median.py compares both with pandas bit for bit. NaN: not logged."""
    size = values.size
    means = np.full(size, np.nan)
    stds = np.full(size, np.nan)
    if size == 0:
        return means, stds
    count = negative = same = 0
    total = total_compensation = 0.0
    mean_x = squares = mean_compensation = 0.0
    previous = float(values[0])
    for index, value in enumerate(values.tolist()):
        if value == value:  # not NaN
            count += 1
            y = value - total_compensation
            t = total + y
            total_compensation = t - total - y
            total = t
            if math.copysign(1.0, value) < 0:
                negative += 1
            same = same + 1 if value == previous else 1
            previous = value
            previous_mean = mean_x - mean_compensation
            y = value - mean_compensation
            t = y - mean_x
            mean_compensation = t + mean_x - y
            mean_x = mean_x + t / count
            squares = squares + (value - previous_mean) * (value - mean_x)
        if count >= min_periods and count > 0:
            mean = total / count
            if same >= count:
                mean = previous
            elif (negative == 0 and mean < 0) or (negative == count and mean > 0):
                mean = 0.0
            means[index] = mean
        if count >= min_periods and count > 1:
            variance = 0.0 if same >= count else squares / (count - 1)
            stds[index] = math.sqrt(variance) if variance > 0 else 0.0
    return means, stds


def spike_score(values: np.ndarray, window_points: int = SPIKE_SCORE_WINDOW) -> float:
    """The fraction of points ≥ 7σ from the trailing mean (OLMo 2's run-level number)."""
    mean, std = rolling_mean_std(values, window_points)
    with np.errstate(invalid="ignore", divide="ignore"):
        distance = np.abs(values - mean) / std
    judged = np.isfinite(distance)
    if not judged.any():
        return 0.0
    return float((distance[judged] >= SPIKE_SCORE_SIGMA).mean())
