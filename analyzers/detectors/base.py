"""The detector interface: one series in, alarms and change points out. No I/O, no printing."""

from __future__ import annotations

from dataclasses import dataclass, field
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


@dataclass(frozen=True)
class Detection:
    detector: str
    alarms: list[Alarm] = field(default_factory=list)
    shifts: list[RegimeShift] = field(default_factory=list)


class Detector(Protocol):
    """Scans one series for upward excursions (spikes) or regime shifts."""

    name: str

    def detect(self, values: np.ndarray, baseline: RobustBaseline) -> Detection:
        """`baseline` is robust_baseline(values), computed once per series and shared."""
        ...
