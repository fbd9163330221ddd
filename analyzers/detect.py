"""Run every registered detector over the series that can spike, and build spikes/change points."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.baseline import robust_baseline
from tscope.analyzers.detectors.base import Detection, Detector
from tscope.analyzers.detectors.cusum import CusumDetector
from tscope.analyzers.detectors.generic_segments import series_change_points
from tscope.analyzers.detectors.merge import merge_alarms
from tscope.analyzers.detectors.pelt import PeltDetector
from tscope.analyzers.detectors.robust_z import RobustZDetector
from tscope.analyzers.detectors.spike_score import SpikeScoreDetector
from tscope.analyzers.signals import loss_series
from tscope.model import ChangePoint, Run, Spike
from tscope.model.metric_names import GRAD_NORM, is_loss_like

DETECTORS: tuple[Detector, ...] = (
    RobustZDetector(),
    SpikeScoreDetector(),
    CusumDetector(),
    PeltDetector(),
)


def scanned_metrics(run: Run) -> list[str]:
    """Loss-like series and the gradient norm: the series whose upward spikes are incidents."""
    return [m for m in run.metric_names if is_loss_like(m) or m == GRAD_NORM]


def detect(run: Run) -> tuple[list[Spike], list[ChangePoint]]:
    spikes: list[Spike] = []
    change_points: list[ChangePoint] = []
    for metric in scanned_metrics(run):
        # Losses with the NaNs a producer hid put back (a logged 0.0 is not a recovery).
        steps, values = loss_series(run, metric) if is_loss_like(metric) else run.series(metric)
        if steps.size == 0:
            continue
        baseline = robust_baseline(values)
        # Regime shifts are read on loss curves only (_change_points); other series get their
        # change points from _generic_change_points, so their detectors skip the shifts.
        detections = [
            detector.detect(values, baseline, with_shifts=is_loss_like(metric))
            for detector in DETECTORS
        ]
        spikes.extend(_spikes(metric, steps, values, detections))
        if is_loss_like(metric):
            change_points.extend(_change_points(metric, steps, detections))
        else:
            change_points.extend(_generic_change_points(metric, steps, values))
    spikes.sort(key=lambda spike: (spike.peak_step, spike.metric))
    spikes = [_with_id(spike, f"S{number}") for number, spike in enumerate(spikes, start=1)]
    change_points.sort(key=lambda cp: (cp.step, cp.metric, cp.detector))
    return spikes, change_points


def _spikes(
    metric: str, steps: np.ndarray, values: np.ndarray, detections: list[Detection]
) -> list[Spike]:
    return [
        Spike(
            id="",
            metric=metric,
            onset_step=int(steps[candidate.onset]),
            peak_step=int(steps[candidate.peak]),
            end_step=int(steps[candidate.end]) if candidate.end is not None else None,
            magnitude=float(candidate.magnitude),
            detectors=candidate.detectors,
            baseline=float(candidate.baseline),
            peak_value=float(candidate.peak_value),
            nonfinite=candidate.nonfinite,
            alarm_score=candidate.alarm_score,
            alarm_detector=candidate.alarm_detector,
        )
        for candidate in merge_alarms(values, detections)
    ]


# A drift keeps re-arming the CUSUM while it lasts; shifts in the same direction within this many
# points are one regime change (the first alarm marks it). The report lists at most
# MAX_CHANGE_POINTS per series, the largest relative level changes.
SHIFT_MERGE_POINTS = 50
MAX_CHANGE_POINTS = 8


def _change_points(
    metric: str, steps: np.ndarray, detections: list[Detection]
) -> list[ChangePoint]:
    found: list[ChangePoint] = []
    for detection in detections:
        index, before, after = detection.shift_arrays()
        order = np.argsort(index, kind="stable")
        index, before, after = index[order], before[order], after[order]
        # A shift within SHIFT_MERGE_POINTS of the previous shift the same way (merged or not)
        # is part of its drift. As arrays: a smooth series has ~n/3 CUSUM shifts.
        rising = after > before
        kept = np.ones(index.size, dtype=bool)
        for direction in (True, False):
            same_way = np.flatnonzero(rising == direction)
            kept[same_way[1:]] = np.diff(index[same_way]) > SHIFT_MERGE_POINTS
        found.extend(
            ChangePoint(metric, int(steps[at]), detection.detector, level_before, level_after)
            for at, level_before, level_after in zip(
                index[kept].tolist(), before[kept].tolist(), after[kept].tolist(), strict=True
            )
        )

    return _largest(found)


# The detector name of change points on series that are not loss curves: exact PELT with a BIC
# penalty, constant or linear segments (detectors/generic_segments.py; the loss-curve PELT and
# CUSUM are tuned for a decaying loss). Measured in bench/bench_change_points.py against binary
# segmentation with the same BIC penalty.
GENERIC_DETECTOR = "pelt_bic"
# Above this many points the series is segmented on bucket means (exact PELT is ~O(n) to O(n²)
# with few changes: 0.2 s at 1,000 points, 7 s at 20,000 on a loaded core); a break is then
# placed at its bucket's first step.
GENERIC_MAX_POINTS = 2000


def _generic_change_points(metric: str, steps: np.ndarray, values: np.ndarray) -> list[ChangePoint]:
    finite = np.isfinite(values)
    steps, values = steps[finite], values[finite]
    bucket = max(1, -(-values.size // GENERIC_MAX_POINTS))
    usable = values.size - values.size % bucket
    means = values[:usable].reshape(-1, bucket).mean(axis=1) if bucket > 1 else values
    breaks, _ = series_change_points(means)
    bounds = [0, *(b * bucket for b in breaks), values.size]
    found = [
        ChangePoint(
            metric,
            int(steps[bounds[k]]),
            GENERIC_DETECTOR,
            float(np.mean(values[bounds[k - 1] : bounds[k]])),
            float(np.mean(values[bounds[k] : bounds[k + 1]])),
        )
        for k in range(1, len(bounds) - 1)
    ]
    return _largest(found)


def _largest(found: list[ChangePoint]) -> list[ChangePoint]:
    """At most MAX_CHANGE_POINTS, the largest relative level changes, in step order."""

    def size(cp: ChangePoint) -> float:
        base = abs(cp.before_mean) or 1.0
        return abs(cp.after_mean - cp.before_mean) / base

    kept = sorted(found, key=size, reverse=True)[:MAX_CHANGE_POINTS]
    return sorted(kept, key=lambda cp: (cp.step, cp.detector))


def _with_id(spike: Spike, spike_id: str) -> Spike:
    from dataclasses import replace

    return replace(spike, id=spike_id)
