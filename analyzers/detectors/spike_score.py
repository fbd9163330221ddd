"""OLMo 2's spike score: points ≥ 7σ from the rolling mean of the previous 1,000 values."""

from __future__ import annotations

import numpy as np
import pandas as pd

from tscope.analyzers.baseline import RobustBaseline
from tscope.analyzers.detectors.base import Detection

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
    """Mean and std of the previous `window_points` finite values (the current one excluded)."""
    series = pd.Series(np.where(np.isfinite(values), values, np.nan))
    rolling = series.rolling(window_points, min_periods=SPIKE_SCORE_MIN_POINTS)
    mean = rolling.mean().shift(1).to_numpy()
    std = rolling.std().shift(1).to_numpy()
    return mean, np.where(std > 0, std, np.nan)


def spike_score(values: np.ndarray, window_points: int = SPIKE_SCORE_WINDOW) -> float:
    """The fraction of points ≥ 7σ from the trailing mean (OLMo 2's run-level number)."""
    mean, std = rolling_mean_std(values, window_points)
    with np.errstate(invalid="ignore", divide="ignore"):
        distance = np.abs(values - mean) / std
    judged = np.isfinite(distance)
    if not judged.any():
        return 0.0
    return float((distance[judged] >= SPIKE_SCORE_SIGMA).mean())
