"""Robust rolling z-score: each point against the median and MAD of the points before it."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.baseline import RobustBaseline
from tscope.analyzers.detectors.base import Detection

# 6 robust sigma: under Gaussian noise a one-sided excess this large has probability ~1e-9 per
# point, so noise alone almost never trips it even on a 10^6-step run; real loss noise has heavier
# tails, which is why alarms are merged with the other detectors' before they become spikes.
ROBUST_Z_ALARM_SIGMA = 6.0


class RobustZDetector:
    name = "robust_z"

    def __init__(self, alarm_sigma: float = ROBUST_Z_ALARM_SIGMA) -> None:
        self.alarm_sigma = alarm_sigma

    def detect(
        self, values: np.ndarray, baseline: RobustBaseline, with_shifts: bool = True
    ) -> Detection:
        z = baseline.zscores(values)
        has_history = np.isfinite(baseline.median)
        nonfinite = ~np.isfinite(values) & has_history
        with np.errstate(invalid="ignore"):
            above = (z >= self.alarm_sigma) & has_history
        alarming = np.flatnonzero(above)
        # The alarms above the threshold, then one (score inf) per non-finite point, sorted by
        # point stably: a +inf point keeps both, the threshold's first.
        broken = np.flatnonzero(nonfinite)
        index = np.concatenate([alarming, broken]).astype(np.int64)
        score = np.concatenate([z[alarming], np.full(broken.size, np.inf)]).astype(np.float64)
        order = np.argsort(index, kind="stable")
        return Detection(self.name, index=index[order], score=score[order])
