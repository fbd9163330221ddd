"""The detector interface: one series in, alarms and change points out. No I/O, no printing."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from tscope.analyzers.baseline import RobustBaseline


@dataclass(frozen=True)
class Alarm:
    index: int  # position in the series (not the step)
    score: float  # detector-specific strength, e.g. sigmas above the baseline


@dataclass(frozen=True)
class RegimeShift:
    index: int  # first point of the new regime
    before_mean: float
    after_mean: float


class Detection:
    """One detector's result on one series: its alarms (index order) and regime shifts.

    The detectors find their alarms as arrays and merge_alarms reads them as arrays; on a
    1,000,000-scalar log that is hundreds of thousands of alarms, and building an Alarm object
    for each was a large part of the analysis (issue 15). So a detection keeps the arrays
    (`alarm_arrays`) and builds the Alarm list only when `alarms` is read.
    """

    __slots__ = ("_alarms", "_index", "_score", "_shift_arrays", "_shifts", "detector")

    def __init__(
        self,
        detector: str,
        alarms: Sequence[Alarm] = (),
        shifts: Sequence[RegimeShift] = (),
        *,
        index: np.ndarray | None = None,
        score: np.ndarray | None = None,
        shift_arrays: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    ) -> None:
        """Alarms either as `alarms` or as the `index` and `score` arrays, not both; shifts
        either as `shifts` or as `shift_arrays` (indices, levels before, levels after)."""
        self.detector = detector
        if shift_arrays is None:
            self._shifts: list[RegimeShift] | None = list(shifts)
            self._shift_arrays = (
                np.asarray([shift.index for shift in shifts], dtype=np.int64),
                np.asarray([shift.before_mean for shift in shifts], dtype=np.float64),
                np.asarray([shift.after_mean for shift in shifts], dtype=np.float64),
            )
        else:
            # A smooth series re-arms the CUSUM every few points: ~n/3 shifts, kept as arrays
            # (detect._change_points reads them so) until `shifts` is read.
            self._shifts = None
            shift_index, before, after = shift_arrays
            self._shift_arrays = (
                np.asarray(shift_index, dtype=np.int64),
                np.asarray(before, dtype=np.float64),
                np.asarray(after, dtype=np.float64),
            )
        if index is None or score is None:
            self._alarms: list[Alarm] | None = list(alarms)
            self._index = np.asarray([alarm.index for alarm in alarms], dtype=np.int64)
            self._score = np.asarray([alarm.score for alarm in alarms], dtype=np.float64)
        else:
            self._alarms = None
            self._index = np.asarray(index, dtype=np.int64)
            self._score = np.asarray(score, dtype=np.float64)

    @property
    def alarms(self) -> list[Alarm]:
        if self._alarms is None:
            self._alarms = [
                Alarm(index, score)
                for index, score in zip(self._index.tolist(), self._score.tolist(), strict=True)
            ]
        return self._alarms

    @property
    def shifts(self) -> list[RegimeShift]:
        if self._shifts is None:
            self._shifts = [
                RegimeShift(index, before, after)
                for index, before, after in zip(
                    *(part.tolist() for part in self._shift_arrays), strict=True
                )
            ]
        return self._shifts

    def shift_arrays(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """(indices, levels before, levels after) of the shifts, in their order; do not modify."""
        return self._shift_arrays

    def alarm_arrays(self) -> tuple[np.ndarray, np.ndarray]:
        """(indices, scores) of the alarms, in their order; do not modify."""
        return self._index, self._score


class Detector(Protocol):
    """Scans one series for upward excursions (spikes) or regime shifts."""

    name: str

    def detect(
        self, values: np.ndarray, baseline: RobustBaseline, with_shifts: bool = True
    ) -> Detection:
        """`baseline` is robust_baseline(values), computed once per series and shared.
        `with_shifts=False`: alarms only (regime shifts are read on loss curves alone; the
        gradient norm's cost nothing then)."""
        ...
