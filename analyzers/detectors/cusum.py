"""Two-sided CUSUM on robust residuals: catches persistent drifts that no single point reveals."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.baseline import BASELINE_WINDOW_POINTS, RobustBaseline, window_stats
from tscope.analyzers.detectors.base import Alarm, Detection, RegimeShift

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

    def detect(self, values: np.ndarray, baseline: RobustBaseline) -> Detection:
        # Freeze the reference at the start of each excursion: a trailing median would otherwise
        # follow the drift and hide it.
        residuals = np.clip(
            np.nan_to_num(baseline.zscores(values), nan=0.0, posinf=CUSUM_RESIDUAL_CLIP_SIGMA),
            -CUSUM_RESIDUAL_CLIP_SIGMA,
            CUSUM_RESIDUAL_CLIP_SIGMA,
        )
        alarms: list[Alarm] = []
        shifts: list[RegimeShift] = []
        excursions = [
            (sign, start, alarm_index, total)
            for sign in (1.0, -1.0)
            for start, alarm_index, total in _one_sided_cusum(
                sign * residuals, self.reference_sigma, self.decision_sigma
            )
        ]
        # Each direction's excursion starts, sorted: the next change the other way is found by
        # bisection (a scan of every excursion per excursion was quadratic: a 250,000-step loss
        # re-arms the CUSUM thousands of times).
        starts_by_sign = {
            direction: np.sort(
                np.asarray([e[1] for e in excursions if e[0] == direction], dtype=np.int64)
            )
            for direction in (1.0, -1.0)
        }
        for sign, start, alarm_index, total in excursions:
            alarms.append(Alarm(alarm_index, sign * total))
            # The level after a change is measured up to the next change the other way (a
            # downward excursion followed by a blow-up must not average the blow-up in).
            others = starts_by_sign[-sign]
            later = int(np.searchsorted(others, start, side="right"))
            next_change = int(others[later]) if later < others.size else len(values)
            shift = self._shift(values, baseline, start, alarm_index, sign, next_change)
            if shift is not None:
                shifts.append(shift)
        alarms.sort(key=lambda alarm: alarm.index)
        shifts.sort(key=lambda shift: shift.index)
        return Detection(self.name, alarms=alarms, shifts=shifts)

    def _shift(
        self,
        values: np.ndarray,
        baseline: RobustBaseline,
        start: int,
        alarm_index: int,
        sign: float,
        next_change: int,
    ) -> RegimeShift | None:
        """The level change behind an alarm, in the direction the CUSUM detected, if it is big
        enough to call a new regime. The "after" window runs from the excursion's start for
        `after_points` (at least to the alarm) and stops at the next change the other way."""
        before, sigma = baseline.median[start], baseline.sigma[start]
        if not np.isfinite(before):
            return None
        end = min(
            max(alarm_index + 1, start + self.after_points), max(next_change, alarm_index + 1)
        )
        after, _ = window_stats(values[start:end])
        if sign * (after - before) < CUSUM_MIN_SHIFT_SIGMA * sigma:
            return None  # smaller than a regime change, or the other way than detected
        return RegimeShift(start, float(before), after)


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
