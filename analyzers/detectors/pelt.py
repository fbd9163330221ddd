"""Regime shifts with PELT (L2 cost, as in ruptures) on a bucketed copy of the series."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.baseline import MAD_TO_SIGMA, RobustBaseline, window_stats
from tscope.analyzers.detectors.base import Detection, RegimeShift
from tscope.analyzers.detectors.pelt_search import pelt_l2_breakpoints

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
# Beyond this magnitude the series is segmented scaled down (squares stay far inside the range).
MAX_UNSCALED = 1e100


class PeltDetector:
    name = "pelt"

    def detect(
        self, values: np.ndarray, baseline: RobustBaseline, with_shifts: bool = True
    ) -> Detection:
        finite_index = np.flatnonzero(np.isfinite(values))
        if not with_shifts or finite_index.size < MIN_POINTS_FOR_PELT:  # PELT gives shifts only
            return Detection(self.name)
        # The L2 cost squares the values and a bucket's median may average two: a series near
        # the float range (two adjacent -1.7e308, red team session 28) overflows to inf. PELT's
        # breakpoints do not change when the series and its penalty are scaled together, so it
        # is segmented in units of its largest magnitude and the levels scaled back.
        scale = float(np.max(np.abs(values[finite_index])))
        scale = scale if scale > MAX_UNSCALED else 1.0
        reduced, first_index = _bucket_medians(values / scale, finite_index)
        noise_sigma = _difference_sigma(reduced)
        if not np.isfinite(noise_sigma) or noise_sigma == 0.0:
            return Detection(self.name)
        min_size = max(2, int(len(reduced) * PELT_MIN_SEGMENT_FRACTION))
        penalty = PELT_PENALTY_FACTOR * noise_sigma**2 * np.log(len(reduced))
        # The last breakpoint is always len(reduced).
        breakpoints = pelt_l2_breakpoints(reduced, min_size, penalty)[:-1]
        shifts: list[RegimeShift] = []
        bounds = [0, *breakpoints, len(reduced)]
        for left, point, right in zip(bounds[:-2], bounds[1:-1], bounds[2:], strict=True):
            before, _ = window_stats(reduced[left:point])
            after, _ = window_stats(reduced[point:right])
            if abs(after - before) >= PELT_MIN_SHIFT_SIGMA * noise_sigma:
                shifts.append(RegimeShift(int(first_index[point]), before * scale, after * scale))
        return Detection(self.name, shifts=shifts)


def _bucket_medians(values: np.ndarray, finite_index: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Median and first index of each of at most PELT_MAX_POINTS consecutive buckets of points.

    The buckets are np.array_split's (the first `remainder` ones one point longer), so each
    group of equal-length buckets is one 2-D array and np.median takes all its rows at once;
    a row's median is the same number np.median gives for that bucket alone.
    """
    count = min(PELT_MAX_POINTS, finite_index.size)
    length, remainder = divmod(finite_index.size, count)
    split = remainder * (length + 1)
    finite = values[finite_index]
    reduced = np.concatenate(
        [
            np.median(finite[:split].reshape(remainder, length + 1), axis=1),
            np.median(finite[split:].reshape(count - remainder, length), axis=1),
        ]
    )
    starts = np.concatenate(
        [np.arange(0, split, length + 1), np.arange(split, finite_index.size, length)]
    )
    return reduced, finite_index[starts]


def _difference_sigma(values: np.ndarray) -> float:
    """Noise level from first differences (robust to trends and level shifts): MAD(diff)/√2."""
    differences = np.diff(values)
    if differences.size == 0:
        return float("nan")
    mad = float(np.median(np.abs(differences - np.median(differences))))
    return float(MAD_TO_SIGMA * mad / np.sqrt(2.0))
