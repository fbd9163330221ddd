"""The median of each point's neighbours, the point itself left out, for every point at once.

A rule that compares each point with the median of the `half` points on each side (a one-step
break against its local trend) would otherwise call np.median once per point: about 7,000 calls
for a 10,000-step log, most of a cluster profile's time (issue 15).
"""

from __future__ import annotations

import numpy as np


def neighbour_medians(values: np.ndarray, half: int, *, partial_ends: bool = False) -> np.ndarray:
    """result[i] = median(values[i-half:i] ++ values[i+1:i+1+half]) where both sides are full
    (half ≤ i < size - half); elsewhere NaN, or with `partial_ends` the median of the neighbours
    the point has (fewer within `half` of either end; NaN for a point with none).

    Same arithmetic as np.median of that 1-D neighbourhood (a partition, then the mean of the two
    middle values), so the numbers agree; callers that need bit-exactness use it as a prefilter
    and recompute the few points that pass.
    """
    result = np.full(values.size, np.nan)
    width = 2 * half + 1
    if half >= 1 and values.size >= width:
        windows = np.lib.stride_tricks.sliding_window_view(values, width)
        neighbours = np.delete(windows, half, axis=1)  # a copy without each window's centre
        result[half : values.size - half] = np.median(neighbours, axis=1)
    if partial_ends:
        ends = (*range(min(half, values.size)), *range(max(values.size - half, half), values.size))
        for i in ends:
            around = np.r_[values[max(0, i - half) : i], values[i + 1 : i + 1 + half]]
            result[i] = np.median(around) if around.size else np.nan
    return result


def neighbour_median_at(values: np.ndarray, half: int, index: int) -> float:
    """neighbour_medians(values, half, partial_ends=True)[index] for one point: the median of
    the neighbours it has within `half` on each side (NaN for a point with none). For a rule that
    needs a few points' medians, not the whole series' (tests/test_speed_paths.py: bit for bit)."""
    around = np.r_[values[max(0, index - half) : index], values[index + 1 : index + 1 + half]]
    return float(np.median(around)) if around.size else float("nan")
