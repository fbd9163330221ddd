"""The case's chart data, made when the case is built: each series cut to a fixed number of chart
points that still shows every spike at full height, and the layer heat map.

Bucket i holds the points of np.array_split(range(n), count)[i]; it keeps its last point and step,
the min and max of its finite values, and its first non-finite value, which stands in for the min
of an all-non-finite bucket and is the max of any bucket that holds one (a NaN must show).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from tscope.model import Run
from tscope.model.case_parts import CHART_BUCKETS, HEATMAP_MAX_LAYERS, LayerHeatmap
from tscope.model.metric_names import LOSS


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


def chart_series(run: Run, metric: str) -> dict[str, list[object]]:
    """The chart's points; a loss the producer logged as 0.0 or a running mean where the step
    was non-finite (the Trainer's logging_nan_inf_filter) is drawn as the NaN it was."""
    from tscope.analyzers.signals import loss_series

    steps, values = loss_series(run, metric) if metric == LOSS else run.series(metric)
    if steps.size <= CHART_BUCKETS:
        return {
            "steps": steps.tolist(),
            "values": values.tolist(),
            "min": values.tolist(),
            "max": values.tolist(),
        }
    return bucketed(steps, values, CHART_BUCKETS)


def layer_heatmap(layers: Any) -> LayerHeatmap | None:
    """names × checkpoint steps matrices of the update ratio and norm growth, for the report;
    None when no checkpoint has a known step (its columns are steps). A checkpoint without one
    (`weights/` saved by hand) is left out of the map, not placed at a made-up step."""
    layers = layers[layers["step"].notna()]
    if layers.empty:
        return None
    steps = sorted(int(s) for s in layers["step"].unique())
    ratio = layers.pivot_table(index="tensor", columns="step", values="update_ratio_per_step")
    growth = layers.pivot_table(index="tensor", columns="step", values="norm_growth_rate")
    order = ratio.max(axis=1).sort_values(ascending=False).index[:HEATMAP_MAX_LAYERS].tolist()
    if not order:
        order = sorted(layers["tensor"].unique().tolist())[:HEATMAP_MAX_LAYERS]

    def matrix(table: Any) -> tuple[tuple[float | None, ...], ...]:
        table = table.reindex(index=order, columns=steps)
        return tuple(
            tuple(None if value != value else float(value) for value in row)
            for row in table.to_numpy().tolist()
        )

    return LayerHeatmap(
        tuple(steps), tuple(str(name) for name in order), matrix(ratio), matrix(growth)
    )
