"""Two-sided CUSUM on robust residuals: catches persistent drifts that no single point reveals."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.baseline import BASELINE_WINDOW_POINTS, RobustBaseline, window_stats
from tscope.analyzers.detectors.base import Detection
from tscope.analyzers.detectors.compiled_loops import (
    COMPILED_MIN_POINTS,
    compiled_cusum,
    compiled_window_medians,
)

# Page's CUSUM with reference k = 0.5σ and decision interval h = 5σ: the textbook design for a
# 1σ shift (Montgomery, Introduction to Statistical Quality Control, §9.1: ARL0 ≈ 930 points).
CUSUM_REFERENCE_SIGMA = 0.5
CUSUM_DECISION_SIGMA = 5.0
# Residuals are clipped so that one huge point cannot trip the CUSUM alone: it is the spike
# detectors' job; CUSUM answers "did the level move and stay".
CUSUM_RESIDUAL_CLIP_SIGMA = 3.0
# A drift is reported as a regime shift only when the median of the window after its start moved
# by this many robust sigmas (the CUSUM design shift is 1σ); noise-driven alarms, whose window
# median stays put, still corroborate spikes but stay out of the change-point list.
CUSUM_MIN_SHIFT_SIGMA = 1.5


class CusumDetector:
    name = "cusum"

    def __init__(
        self,
        reference_sigma: float = CUSUM_REFERENCE_SIGMA,
        decision_sigma: float = CUSUM_DECISION_SIGMA,
    ) -> None:
        self.reference_sigma = reference_sigma
        self.decision_sigma = decision_sigma
        self.after_points = BASELINE_WINDOW_POINTS

    def detect(
        self, values: np.ndarray, baseline: RobustBaseline, with_shifts: bool = True
    ) -> Detection:
        # Freeze the reference at the start of each excursion: a trailing median would otherwise
        # follow the drift and hide it.
        residuals = np.clip(
            np.nan_to_num(baseline.zscores(values), nan=0.0, posinf=CUSUM_RESIDUAL_CLIP_SIGMA),
            -CUSUM_RESIDUAL_CLIP_SIGMA,
            CUSUM_RESIDUAL_CLIP_SIGMA,
        )
        # Excursions as arrays (start, alarm index, sum at the alarm, direction): upward first,
        # as the list this replaces was built; a smooth series has ~n/3 of them.
        found = [
            _excursions(sign * residuals, self.reference_sigma, self.decision_sigma)
            for sign in (1.0, -1.0)
        ]
        starts = np.concatenate([f[0] for f in found])
        alarm_indices = np.concatenate([f[1] for f in found])
        signs = np.repeat([1.0, -1.0], [f[0].size for f in found])
        scores = signs * np.concatenate([f[2] for f in found])
        # Stable orders: equal indices keep the upward excursion first, as list.sort did.
        order = np.argsort(alarm_indices, kind="stable")
        return Detection(
            self.name,
            index=alarm_indices[order],
            score=scores[order],
            shift_arrays=self._shifts(values, baseline, starts, alarm_indices, signs)
            if with_shifts
            else None,
        )

    def _shifts(
        self,
        values: np.ndarray,
        baseline: RobustBaseline,
        starts: np.ndarray,
        alarm_indices: np.ndarray,
        signs: np.ndarray,
    ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The level change behind each alarm (indices, levels before, levels after), in the
        direction the CUSUM detected, where it is big enough to call a new regime, in index
        order. The "after" window runs from the excursion's start for `after_points` (at least
        to the alarm) and stops at the next change the other way: a downward excursion followed
        by a blow-up must not average the blow-up in. All excursions at once: a smooth series
        re-arms the CUSUM every few points."""
        # The next excursion start of the other direction, by bisection in its sorted starts.
        next_change = np.full(starts.size, len(values), dtype=np.int64)
        for direction in (1.0, -1.0):
            mine = signs == direction
            others = np.sort(starts[signs == -direction])
            later = np.searchsorted(others, starts[mine], side="right")
            beyond = later < others.size
            next_change[np.flatnonzero(mine)[beyond]] = others[later[beyond]]
        before, sigma = baseline.median[starts], baseline.sigma[starts]
        measured = np.isfinite(before)
        ends = np.minimum(
            np.maximum(alarm_indices + 1, starts + self.after_points),
            np.maximum(next_change, alarm_indices + 1),
        )
        after = np.full(starts.size, np.nan)
        after[measured] = _window_medians(values, starts[measured], ends[measured])
        with np.errstate(invalid="ignore"):
            smaller = signs * (after - before) < CUSUM_MIN_SHIFT_SIGMA * sigma
        # A NaN "after" (no finite point in the window) is not smaller: kept, as it always was.
        kept = np.flatnonzero(measured & ~smaller)
        kept = kept[np.argsort(starts[kept], kind="stable")]
        return starts[kept], before[kept], after[kept]


def _excursions(
    residuals: np.ndarray, reference: float, decision: float
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """_one_sided_cusum as arrays (starts, alarm indices, sums at the alarms), compiled on long
    series when numba is there (the same excursions)."""
    if residuals.size >= COMPILED_MIN_POINTS:
        compiled = compiled_cusum(residuals, reference, decision, _CUSUM_CHUNK)
        if compiled is not None:
            return compiled
    listed = _one_sided_cusum(residuals, reference, decision)
    return (
        np.asarray([e[0] for e in listed], dtype=np.int64),
        np.asarray([e[1] for e in listed], dtype=np.int64),
        np.asarray([e[2] for e in listed], dtype=np.float64),
    )


def _window_medians(values: np.ndarray, lows: np.ndarray, highs: np.ndarray) -> np.ndarray:
    """window_stats(values[low:high])[0] for each window."""
    if values.size >= COMPILED_MIN_POINTS:
        medians = compiled_window_medians(values, lows, highs)
        if medians is not None:
            return medians
    return np.asarray(
        [
            window_stats(values[low:high])[0]
            for low, high in zip(lows.tolist(), highs.tolist(), strict=True)
        ],
        dtype=np.float64,
    )


# Chunk length for the vectorized recursion (an alarm restarts the sum, and with it the chunk).
_CUSUM_CHUNK = 1024
# After a restart the next alarm often comes within a few dozen points (a long drift re-arms the
# CUSUM again and again), so each chunk is first summed over this many points only, and in full
# only when that finds no alarm. Cumulative sums and minima of a prefix do not depend on how far
# the chunk extends, so the alarms are the same as from whole chunks.
_CUSUM_FIRST_LOOK = 64


def _one_sided_cusum(
    residuals: np.ndarray, reference: float, decision: float
) -> list[tuple[int, int, float]]:
    """(excursion start, alarm index, sum at alarm) for S_t = max(0, S_{t-1} + r_t - k), reset at h.

    Vectorized with the identity S_t = C_t - min(-S_0, min_{j<=t} C_j), C the cumulative sum of
    (r - k) since the chunk start, so a 10^6-point series takes milliseconds, not a Python loop.
    """
    found: list[tuple[int, int, float]] = []
    position, carried, excursion_start = 0, 0.0, 0
    total_points = len(residuals)
    while position < total_points:
        sums = _chunk_sums(residuals[position : position + _CUSUM_FIRST_LOOK], reference, carried)
        crossing = np.flatnonzero(sums > decision)
        if crossing.size == 0 and position + sums.size < total_points:
            sums = _chunk_sums(residuals[position : position + _CUSUM_CHUNK], reference, carried)
            crossing = np.flatnonzero(sums > decision)
        # The last point where the sum was zero starts the excursion leading to each point.
        zero_at = np.flatnonzero(sums <= 0.0)
        if crossing.size == 0:
            if zero_at.size:
                excursion_start = position + int(zero_at[-1]) + 1
            carried = float(sums[-1])
            position += sums.size
            continue
        first = int(crossing[0])
        zeros_before = zero_at[zero_at < first]
        if zeros_before.size:
            excursion_start = position + int(zeros_before[-1]) + 1
        found.append((excursion_start, position + first, float(sums[first])))
        position += first + 1
        carried, excursion_start = 0.0, position
    return found


def _chunk_sums(residuals: np.ndarray, reference: float, carried: float) -> np.ndarray:
    """S over one chunk, starting from the sum `carried` over from the previous chunk."""
    cumulative = np.cumsum(residuals - reference)
    floor = np.minimum(np.minimum.accumulate(cumulative), -carried)
    sums: np.ndarray = cumulative - floor
    return sums
