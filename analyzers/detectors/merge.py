"""Merge the detectors' alarms on one series into spike events with onset, peak, end, magnitude."""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np

from tscope.analyzers.baseline import BASELINE_WINDOW_POINTS, window_stats
from tscope.analyzers.detectors.base import Detection

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
    flagged: dict[int, set[str]] = {}
    scores: dict[tuple[int, str], float] = {}  # (index, detector) -> that alarm's score
    for detection in detections:
        for alarm in detection.alarms:
            if alarm.score > 0:  # upward excursions only: a loss falling is not an incident
                flagged.setdefault(alarm.index, set()).add(detection.detector)
                scores[(alarm.index, detection.detector)] = alarm.score
    if not flagged:
        return []
    indices = sorted(flagged)
    groups: list[list[int]] = [[indices[0]]]
    for index in indices[1:]:
        if index - groups[-1][-1] <= MERGE_GAP_POINTS:
            groups[-1].append(index)
        else:
            groups.append([index])

    candidates = []
    for group in groups:
        names = set().union(*(flagged[i] for i in group))
        if not names.intersection(POINT_DETECTORS):
            continue
        candidate = _describe(values, group, names)
        if candidate is not None:
            candidates.append(_with_alarm_score(candidate, group, scores))
    return candidates


def _with_alarm_score(
    candidate: SpikeCandidate, group: list[int], scores: dict[tuple[int, str], float]
) -> SpikeCandidate:
    for detector in POINT_DETECTORS:  # robust_z first: its robust σ is the report's unit
        finite = [
            scores[(index, detector)]
            for index in group
            if (index, detector) in scores and np.isfinite(scores[(index, detector)])
        ]
        if finite:
            return replace(candidate, alarm_score=max(finite), alarm_detector=detector)
    return candidate


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
    end = None
    recovered = np.flatnonzero(values[last + 1 :] <= baseline + RECOVERY_SIGMA * sigma)
    if recovered.size:
        end = last + 1 + int(recovered[0])
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
