"""A long series cut to a fixed number of chart points that still shows every spike at full height.

Bucket i holds the points of np.array_split(range(n), count)[i]; it keeps its last point and step,
the min and max of its finite values, and its first non-finite value, which stands in for the min
of an all-non-finite bucket and is the max of any bucket that holds one (a NaN must show).
"""

from __future__ import annotations

import numpy as np


def bucketed(steps: np.ndarray, values: np.ndarray, count: int) -> dict[str, list[object]]:
    """{"steps", "values", "min", "max"}: one entry per bucket; needs more points than buckets.

    Whole-array reductions instead of a loop over buckets: a 10^4-point run has 1200 buckets
    per series, which a Python loop took ~10 ms over.
    """
    length, remainder = divmod(steps.size, count)
    sizes = np.full(count, length)
    sizes[:remainder] += 1  # as np.array_split: the first `remainder` buckets one point longer
    ends = np.cumsum(sizes)
    starts = ends - sizes
    finite = np.isfinite(values)
    has_finite = np.add.reduceat(finite, starts) > 0
    low = np.minimum.reduceat(np.where(finite, values, np.inf), starts)
    high = np.maximum.reduceat(np.where(finite, values, -np.inf), starts)
    nonfinite_at = np.flatnonzero(~finite)
    first = np.searchsorted(nonfinite_at, starts)  # the bucket's first non-finite, if it has one
    first_nonfinite = np.append(values[nonfinite_at], np.nan)[first]
    holds_nonfinite = np.append(nonfinite_at, steps.size)[first] < ends
    low = np.where(has_finite, low, first_nonfinite)
    high = np.where(holds_nonfinite, first_nonfinite, high)
    # Which of 0.0 and -0.0 a min or max returns depends on the order it compares them in: a zero
    # extreme is taken again from its own bucket, exactly as a per-bucket min or max gives it.
    for index in np.flatnonzero(has_finite & ((low == 0) | (high == 0))):
        chunk = values[starts[index] : ends[index]]
        chunk = chunk[np.isfinite(chunk)]
        low[index] = chunk.min()
        if not holds_nonfinite[index]:
            high[index] = chunk.max()
    return {
        "steps": steps[ends - 1].tolist(),
        "values": values[ends - 1].tolist(),
        "min": low.tolist(),
        "max": high.tolist(),
    }
