"""The frame of the cluster charts: runs read from cluster.json's `chart.runs` (typed), the plot box and its
axes, run curves broken at NaN/Inf, and the ▼ marks that stand for NaN/Inf.

Coordinates are written with one decimal so the same payload always gives the same bytes; run
names (hover titles) are XML-escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tscope.model.cluster import CHART_MAX_RUNS, CHART_POINTS
from tscope.model.cluster_file import ClusterFile
from tscope.render.charts import FRAME, GRID, NONFINITE_COLOR, PLOT_LEFT, PLOT_RIGHT
from tscope.render.formatting import format_number, format_step, optional_float
from tscope.render.series import (
    LOG_PADDING,
    OUTLIER_RATIO,
    Scale,
    axis_range,
    choose_scale,
    finite_runs,
    is_finite,
    nice_ticks,
    ticks_for,
)
from tscope.render.svg import line, rect, text, triangle, xml_text

TITLE_ROW = 26  # chart title and legend above the plot
PLOT_HEIGHT = 220
AXIS_HEIGHT = 42  # step tick labels and the axis name under the plot
INK_SOFT = "#555555"  # reference lines and secondary labels


@dataclass(frozen=True)
class ChartRun:
    """One run of `chart.runs`, parsed: NaN/Inf kept, points without a step dropped."""

    name: str
    status: str
    cluster: str | None
    explosion_step: float | None
    baseline_loss: float | None
    steps: tuple[float, ...]
    values: tuple[float | None, ...]


@dataclass(frozen=True)
class Plot:
    """Where the data goes: pixel box, x range and y scale."""

    top: float
    x_low: float
    x_high: float
    scale: Scale

    @property
    def bottom(self) -> float:
        return self.top + PLOT_HEIGHT

    def x(self, value: float) -> float:
        return PLOT_LEFT + (value - self.x_low) / (self.x_high - self.x_low) * (
            PLOT_RIGHT - PLOT_LEFT
        )

    def y(self, value: float) -> float:
        return self.bottom - self.scale.fraction(value) * PLOT_HEIGHT


def chart_runs(report: ClusterFile) -> list[ChartRun]:
    """The runs to draw, as analysis bounds them (CHART_MAX_RUNS of CHART_POINTS): a cluster.json
    given to `tscope report` may come from anyone (2,000 runs of 2,000 points in 26 MB drew a
    46 MB cluster.html in 1.2 GB of memory)."""
    runs = []
    for raw in report.chart_runs[:CHART_MAX_RUNS]:
        every = max(1, -(-len(raw.steps) // CHART_POINTS))  # every k-th point: ≤ CHART_POINTS
        steps = [optional_float(step) for step in raw.steps[::every]]
        values = [optional_float(value) for value in raw.values[::every]]
        keep = [i for i, step in enumerate(steps[: len(values)]) if is_finite(step)]
        runs.append(
            ChartRun(
                name=raw.name,
                status=raw.status,
                cluster=raw.cluster,
                explosion_step=optional_float(raw.explosion_step),
                baseline_loss=optional_float(raw.baseline_loss),
                steps=tuple(float(steps[i] or 0.0) for i in keep),
                values=tuple(values[i] for i in keep),
            )
        )
    return [run for run in runs if run.steps]


def grid(plot: Plot) -> list[str]:
    parts = []
    for step in _x_ticks(plot):
        parts.append(line(plot.x(step), plot.top, plot.x(step), plot.bottom, GRID))
    for tick in ticks_for(plot.scale):
        parts.append(line(PLOT_LEFT, plot.y(tick), PLOT_RIGHT, plot.y(tick), GRID))
        parts.append(text(PLOT_LEFT - 6, plot.y(tick) + 4, format_number(tick), anchor="end"))
    return parts


def x_axis(plot: Plot, label: str) -> list[str]:
    parts = [
        text(plot.x(step), plot.bottom + 15, format_step(step), anchor="middle")
        for step in _x_ticks(plot)
    ]
    parts.append(text((PLOT_LEFT + PLOT_RIGHT) / 2, plot.bottom + 34, label, anchor="middle"))
    return parts


def _x_ticks(plot: Plot) -> list[float]:
    return nice_ticks(plot.x_low, plot.x_high, target=8, integer=True)


def frame(plot: Plot) -> str:
    return rect(
        PLOT_LEFT,
        plot.top,
        PLOT_RIGHT - PLOT_LEFT,
        PLOT_HEIGHT,
        "none",
        f'stroke="{FRAME}" stroke-width="1"',
    )


def scale_label(plot: Plot) -> list[str]:
    if plot.scale.kind == "linear":
        return []
    label = "log scale" if plot.scale.kind == "log" else "axis clipped"
    return [text(PLOT_RIGHT, TITLE_ROW - 8, label, anchor="end", color=INK_SOFT)]


def run_line(plot: Plot, run: ChartRun, color: str, width: float, opacity: float) -> list[str]:
    """A run's curve, broken at NaN/Inf; its name is the hover title."""
    parts = polyline(plot, run.steps, run.values, color, width, opacity)
    if not parts:
        return []
    return [f'<g class="run"><title>{xml_text(run.name)}</title>{"".join(parts)}</g>']


def polyline(
    plot: Plot,
    steps: Sequence[float],
    values: Sequence[float | None],
    color: str,
    width: float,
    opacity: float,
) -> list[str]:
    parts = []
    for indices in finite_runs([(value, value) for value in values]):
        points = " ".join(f"{plot.x(steps[i]):.1f},{plot.y(values[i] or 0.0):.1f}" for i in indices)
        if len(indices) == 1:
            x, y = points.split(",")
            parts.append(f'<circle cx="{x}" cy="{y}" r="1.8" fill="{color}"/>')
            continue
        parts.append(
            f'<polyline points="{points}" fill="none" stroke="{color}" stroke-width="{width:.1f}" '
            f'stroke-opacity="{opacity:.2f}" stroke-linejoin="round"/>'
        )
    return parts


def nonfinite_marks(
    plot: Plot,
    runs: Sequence[ChartRun],
    notes: list[str],
    logged_nonfinite: int | None = None,
) -> list[str]:
    """NaN/Inf cannot sit on an axis: a red ▼ at the plot's top edge, one per pixel column.

    `logged_nonfinite`: how many of these runs logged NaN/Inf anywhere, when the plot shows only
    part of their steps (the aligned chart's offsets); the note then gives both counts, so it
    agrees with the cluster's label ("3 of 4 to NaN/Inf")."""
    columns: set[int] = set()
    affected = 0
    for run in runs:
        steps = [s for s, v in zip(run.steps, run.values, strict=True) if _nonfinite(v)]
        columns.update(round(plot.x(step)) for step in steps)
        affected += bool(steps)
    if not columns:
        return []
    marks = [
        triangle(x, plot.top + 1, NONFINITE_COLOR, pointing_down=True) for x in sorted(columns)
    ]
    total = affected if logged_nonfinite is None else max(logged_nonfinite, affected)
    logged = f"{total} of {len(runs)} run{'s' if len(runs) != 1 else ''} logged NaN/Inf loss"
    if total != affected:
        notes.append(f"{logged}; {affected} within the steps shown, marked ▼ at the top edge.")
    else:
        notes.append(f"{logged}, marked ▼ at the top edge.")
    return [f'<g class="nonfinite">{"".join(marks)}</g>']


def loss_scale(finite: Sequence[float]) -> Scale:
    """choose_scale, and log too when positive losses span more than OUTLIER_RATIO: a cluster
    whose runs all exploded has a high median, yet its pre-explosion steps still need room."""
    scale = choose_scale(finite)
    if scale.kind == "linear" and finite and min(finite) > 0:
        low, high = min(finite), max(finite)
        if high > OUTLIER_RATIO * low:
            return Scale("log", low / LOG_PADDING, high * LOG_PADDING)
    return scale


def span_of(values: Sequence[float]) -> tuple[float, float] | None:
    return (min(values), max(values)) if values else None


def widened(low: float, high: float) -> tuple[float, float]:
    return axis_range(low, high)  # a width above 0.0 in float, as the step axis needs


def _nonfinite(value: float | None) -> bool:
    return value is not None and not is_finite(value)
