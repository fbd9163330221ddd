"""Merge the detectors' alarms on one series into spike events with onset, peak, end, magnitude."""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from tscope.analyzers.baseline import BASELINE_WINDOW_POINTS, window_stats
from tscope.analyzers.detectors.base import Detection
from tscope.model.metric_table import sorted_unique

# Alarms closer than this many points belong to one incident (a spike and its echo).
MERGE_GAP_POINTS = 5
# Onset: walking back from the first alarm, the earliest point already this far above baseline.
ONSET_SIGMA = 3.0
# End: the first point after the last alarm back within this band of the baseline.
RECOVERY_SIGMA = 3.0
# Detectors that judge single points; CUSUM alone describes a drift, not a spike.
POINT_DETECTORS = ("robust_z", "spike_score")


@dataclass(frozen=True)
class SpikeCandidate:
    onset: int  # indices into the series
    peak: int
    end: int | None
    baseline: float
    sigma: float
    peak_value: float
    magnitude: float
    nonfinite: bool
    detectors: tuple[str, ...]
    # The number a detector compared with its threshold: the largest finite score of the group's
    # point alarms, robust_z's (robust σ) when it alarmed, else spike_score's (σ). `magnitude`
    # measures against the window's MAD instead and can sit below the alarm threshold, so the
    # report prints this one beside the threshold. None when every alarm was a NaN/Inf point.
    alarm_score: float | None = None
    alarm_detector: str | None = None


def merge_alarms(values: np.ndarray, detections: list[Detection]) -> list[SpikeCandidate]:
    # Upward excursions only (a loss falling is not an incident), as arrays: a smooth series
    # gives CUSUM an alarm every few points, and a dict entry per alarm was the cost.
    alarms: dict[str, tuple[np.ndarray, np.ndarray]] = {}
    for detection in detections:  # two detections of one name add up, in order
        index, score = detection.alarm_arrays()
        if detection.detector in alarms:
            earlier_index, earlier_score = alarms[detection.detector]
            index, score = np.append(earlier_index, index), np.append(earlier_score, score)
        alarms[detection.detector] = (index, score)
    upward = {}
    for name, (index, score) in alarms.items():
        # By point, stably: of two alarms at one point the later one still wins (see below).
        order = np.argsort(index, kind="stable")
        index, score = index[order], score[order]
        upward[name] = (index[score > 0], score[score > 0])
    flagged = sorted_unique(
        np.concatenate([index for index, _ in upward.values()] or [np.empty(0, dtype=np.int64)])
    )
    if flagged.size == 0:
        return []
    flagged = flagged.astype(np.int64)
    # Alarms closer than MERGE_GAP_POINTS (between consecutive flagged points) are one group.
    group_starts = np.concatenate(([0], np.flatnonzero(np.diff(flagged) > MERGE_GAP_POINTS) + 1))
    group_ends = np.append(group_starts[1:], flagged.size)  # exclusive
    point_groups = sorted_unique(
        np.concatenate(
            [
                np.searchsorted(group_starts, np.searchsorted(flagged, index), side="right") - 1
                for name, (index, _) in upward.items()
                if name in POINT_DETECTORS
            ]
            or [np.empty(0, dtype=np.int64)]
        )
    ).astype(np.int64)
    candidates = []
    for number in point_groups.tolist():
        group = flagged[group_starts[number] : group_ends[number]]
        low, high = int(group[0]), int(group[-1])
        in_group = {
            name: (index[start:stop], score[start:stop])
            for name, (index, score) in upward.items()
            for start, stop in [np.searchsorted(index, [low, high + 1])]
            if stop > start
        }
        candidate = _describe(values, group.tolist(), set(in_group))
        if candidate is not None:
            candidates.append(_with_alarm_score(candidate, in_group))
    return candidates


def _with_alarm_score(
    candidate: SpikeCandidate, in_group: dict[str, tuple[np.ndarray, np.ndarray]]
) -> SpikeCandidate:
    for detector in POINT_DETECTORS:  # robust_z first: its robust σ is the report's unit
        if detector not in in_group:
            continue
        # One score per point: a later alarm at the same point replaces an earlier one.
        by_point = dict(zip(*(part.tolist() for part in in_group[detector]), strict=True))
        finite = [score for score in by_point.values() if math.isfinite(score)]
        if finite:
            return replace(candidate, alarm_score=max(finite), alarm_detector=detector)
    return candidate


def _first_at_or_below(values: np.ndarray, start: int, bound: float) -> int | None:
    """The first index from `start` whose value is at most `bound` (None: none), looked for in
    windows that double: a spike usually recovers within a few points, and a scan to the end of
    the series for each of them made the cost points × spikes (a 1M-row log with 50,000 spikes:
    minutes, red team session 27)."""
    size = 64
    while start < values.size:
        hits = np.flatnonzero(values[start : start + size] <= bound)
        if hits.size:
            return start + int(hits[0])
        start += size
        size *= 2
    return None


def _describe(values: np.ndarray, group: list[int], names: set[str]) -> SpikeCandidate | None:
    first, last = group[0], group[-1]
    baseline, sigma = window_stats(values[max(0, first - BASELINE_WINDOW_POINTS) : first])
    if not np.isfinite(baseline) or (baseline == 0.0 and sigma <= 1e-12):
        return None  # no baseline, or a metric logged as a constant 0 (not measured)
    onset = first
    while onset > 0 and values[onset - 1] > baseline + ONSET_SIGMA * sigma:
        onset -= 1
    window = values[onset : last + 1]
    nonfinite_positions = np.flatnonzero(~np.isfinite(window))
    if nonfinite_positions.size:
        peak = onset + int(nonfinite_positions[0])
    else:
        peak = onset + int(np.argmax(window))
    end = _first_at_or_below(values, last + 1, baseline + RECOVERY_SIGMA * sigma)
    peak_value = float(values[peak])
    finite_window = window[np.isfinite(window)]
    worst_finite = float(finite_window.max()) if finite_window.size else baseline
    magnitude = (worst_finite - baseline) / sigma
    return SpikeCandidate(
        onset=onset,
        peak=peak,
        end=end,
        baseline=baseline,
        sigma=sigma,
        peak_value=peak_value,
        magnitude=magnitude,
        nonfinite=bool(nonfinite_positions.size),
        detectors=tuple(sorted(names)),
    )
