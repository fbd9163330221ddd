"""The common-fate loss band: a cluster's runs aligned on their explosion step.

Each member's loss is divided by its own early baseline (so runs of different sizes and data share
one scale: 1.0 = where the run started) and read at the same offsets from its explosion step. The
band is the median and interquartile range across members at each offset.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tscope.model.cluster import LossBand, RunProfile

# At most this many offsets in a band (a chart is ~600 px wide; more points add nothing).
BAND_MAX_POINTS = 400
# How far before/after the explosion the band reaches, at most, in logged points of the median
# member; beyond that few runs have data and the band says nothing.
BAND_MAX_SPAN_POINTS = 2000


def loss_band(members: Sequence[RunProfile]) -> LossBand | None:
    aligned = [p for p in members if p.explosion_step is not None and p.baseline_loss]
    if not aligned:
        return None
    interval = int(
        max(np.median(np.diff(p.loss.steps)) if p.loss.steps.size > 1 else 1 for p in aligned)
    )
    interval = max(interval, 1)
    before = int(np.median([p.explosion_step - p.loss.steps[0] for p in aligned]))  # type: ignore[operator]
    after = int(np.median([p.loss.steps[-1] - p.explosion_step for p in aligned]))  # type: ignore[operator]
    before = min(before, BAND_MAX_SPAN_POINTS * interval)
    after = min(after, BAND_MAX_SPAN_POINTS * interval)
    offsets = np.arange(-before, after + 1, interval, dtype=np.int64)
    if offsets.size > BAND_MAX_POINTS:
        stride = int(np.ceil(offsets.size / BAND_MAX_POINTS))
        offsets = np.unique(np.concatenate([offsets[::stride], [0]]))
    table = np.full((len(aligned), offsets.size), np.nan)  # (runs, offsets), loss / baseline
    for row, profile in enumerate(aligned):
        table[row] = _values_at(profile, profile.explosion_step + offsets, interval)  # type: ignore[operator]
    counts = np.isfinite(table).sum(axis=0)
    needed = min(2, len(aligned))
    keep = counts >= needed
    if not keep.any():
        return None
    kept = table[:, keep]
    with np.errstate(all="ignore"):
        quartiles = np.nanpercentile(kept, [25, 50, 75], axis=0)
    return LossBand(
        offsets=tuple(int(o) for o in offsets[keep]),
        median=tuple(float(v) for v in quartiles[1]),
        lower=tuple(float(v) for v in quartiles[0]),
        upper=tuple(float(v) for v in quartiles[2]),
        runs_per_point=tuple(int(c) for c in counts[keep]),
    )


def _values_at(profile: RunProfile, steps: np.ndarray, interval: int) -> np.ndarray:
    """The run's loss / baseline at each step: the nearest logged point within half an interval,
    NaN where the run logged nothing near, or a non-finite loss."""
    logged = profile.loss.steps
    position = np.clip(np.searchsorted(logged, steps), 0, logged.size - 1)
    previous = np.clip(position - 1, 0, logged.size - 1)
    nearer = np.where(
        np.abs(logged[previous] - steps) <= np.abs(logged[position] - steps), previous, position
    )
    values = profile.loss.values[nearer] / float(profile.baseline_loss or 1.0)
    close = np.abs(logged[nearer] - steps) <= max(interval // 2, 0)
    return np.where(close & np.isfinite(values), values, np.nan)
