"""Regime shifts with ruptures' PELT on a bucketed copy of the series."""

from __future__ import annotations

import numpy as np
from tscope.analyzers.baseline import MAD_TO_SIGMA, RobustBaseline, window_stats
from tscope.analyzers.detectors.base import Detection, RegimeShift

# PELT is O(n) to O(n^2); regime shifts live on scales of many steps, so the series is first
# reduced to at most this many bucket medians (which also removes one-step spikes).
PELT_MAX_POINTS = 300
# Penalty = factor * sigma^2 * log(n): the BIC penalty for a mean shift is 2σ²·log n; a factor of 4
# keeps the noise of small-batch runs from producing breakpoints (checked on shared/realdata).
PELT_PENALTY_FACTOR = 4.0
# Segments shorter than 5% of the run are spikes or noise, not regimes.
PELT_MIN_SEGMENT_FRACTION = 0.05
# A detected breakpoint is reported only if the level moved this many noise sigmas.
PELT_MIN_SHIFT_SIGMA = 3.0
MIN_POINTS_FOR_PELT = 30


class PeltDetector:
    name = "pelt"

    def detect(self, values: np.ndarray, baseline: RobustBaseline) -> Detection:
        finite_index = np.flatnonzero(np.isfinite(values))
        if finite_index.size < MIN_POINTS_FOR_PELT:
            return Detection(self.name)
        import ruptures  # heavy: imported only when a series is long enough to segment

        buckets = np.array_split(finite_index, min(PELT_MAX_POINTS, finite_index.size))
        reduced = np.array([np.median(values[bucket]) for bucket in buckets])
        first_index = np.array([int(bucket[0]) for bucket in buckets])
        noise_sigma = _difference_sigma(reduced)
        if not np.isfinite(noise_sigma) or noise_sigma == 0.0:
            return Detection(self.name)
        min_size = max(2, int(len(reduced) * PELT_MIN_SEGMENT_FRACTION))
        penalty = PELT_PENALTY_FACTOR * noise_sigma**2 * np.log(len(reduced))
        algorithm = ruptures.Pelt(model="l2", min_size=min_size, jump=1).fit(reduced)
        breakpoints = algorithm.predict(pen=penalty)[:-1]  # the last one is always len(signal)
        shifts: list[RegimeShift] = []
        bounds = [0, *breakpoints, len(reduced)]
        for left, point, right in zip(bounds[:-2], bounds[1:-1], bounds[2:], strict=True):
            before, _ = window_stats(reduced[left:point])
            after, _ = window_stats(reduced[point:right])
            if abs(after - before) >= PELT_MIN_SHIFT_SIGMA * noise_sigma:
                shifts.append(RegimeShift(int(first_index[point]), before, after))
        return Detection(self.name, shifts=shifts)


def _difference_sigma(values: np.ndarray) -> float:
    """Noise level from first differences (robust to trends and level shifts): MAD(diff)/√2."""
    differences = np.diff(values)
    if differences.size == 0:
        return float("nan")
    mad = float(np.median(np.abs(differences - np.median(differences))))
    return float(MAD_TO_SIGMA * mad / np.sqrt(2.0))
