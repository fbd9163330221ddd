"""One panel of a stacked step chart: grid, y ticks, the lines and their min–max bands, NaN/Inf
markers, clipped outliers, and the title with its unit.

Labels drawn here are placed so that none overlaps another: tests/test_render_layout.py checks
it from the same glyph-width estimate (svg.CHAR_WIDTH) that places them.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tscope.render.chart_style import (
    FRAME,
    GRID,
    LINE_COLORS,
    MUTED_INK,
    NONFINITE_COLOR,
    PLOT_LEFT,
    PLOT_RIGHT,
)
from tscope.render.formatting import format_number, format_step
from tscope.render.series import Scale, Series, choose_scale, finite_runs, ticks_for
from tscope.render.svg import CHAR_WIDTH, line, rect, text, tooltip, triangle

MAX_LABELLED_OUTLIERS = 3
SPARSE_POINTS = (
    64  # this short (eval loss, a ±30-step zoom) gets a dot per point: the line only joins them
)
LABEL_GAP = 6  # px kept free between two labels on one row


@dataclass(frozen=True)
class Panel:
    title: str
    series: tuple[Series, ...]
    unit: str = ""  # written after the title: "Loss · nats"
    # A positive series spanning more than this factor is drawn on a log axis (the learning
    # rate over a warm-up: ×20 on a linear axis flattens the first half to the floor). None:
    # the usual rule, log only when a few values dwarf the rest.
    log_above_span: float | None = None

    @property
    def heading(self) -> str:
        return f"{self.title} · {self.unit}" if self.unit else self.title


def label_width(content: str, size: float = 11, bold: bool = False) -> float:
    """Estimated advance of a label: the layout test measures labels the same way."""
    return len(content) * CHAR_WIDTH * size / 11 * (1.1 if bold else 1.0)


def panel_svg(
    panel: Panel,
    top: float,
    height: float,
    x_of: Callable[[float], float],
    x_ticks: Sequence[float],
    notes: list[str],
) -> list[str]:
    finite = [v for series in panel.series for v in series.finite_points()]
    scale = choose_scale(finite, panel.log_above_span)
    bottom = top + height

    def y_of(value: float) -> float:
        return bottom - scale.fraction(value) * height

    parts: list[str] = []
    for step in x_ticks:
        parts.append(line(x_of(step), top, x_of(step), bottom, GRID))
    for tick in ticks_for(scale):
        parts.append(line(PLOT_LEFT, y_of(tick), PLOT_RIGHT, y_of(tick), GRID))
        parts.append(text(PLOT_LEFT - 6, y_of(tick) + 4, format_number(tick), anchor="end"))
    for series, color in zip(panel.series, LINE_COLORS, strict=False):
        parts.extend(_band_svg(series, x_of, y_of, color))
        parts.extend(_line_svg(series, x_of, y_of, color))
    occupied: list[tuple[float, float]] = []  # x extents of the labels along the top edge
    for series, color in zip(panel.series, LINE_COLORS, strict=False):
        parts.extend(_nonfinite_svg(series, x_of, top, notes, occupied))
        if scale.kind == "clipped":
            parts.extend(_outliers_svg(series, scale, x_of, top, color, notes, occupied))
    frame = f'stroke="{FRAME}" stroke-width="1"'
    parts.append(rect(PLOT_LEFT, top, PLOT_RIGHT - PLOT_LEFT, height, "none", frame))
    parts.extend(_legend_svg(panel, top - 8, scale))
    if scale.kind == "log":
        positive = [value for value in finite if value > 0]
        span = format_number(max(positive) / min(positive))
        ratio = format_number(max(positive) / statistics.median(positive))
        zeros = " Values ≤ 0 sit on the bottom edge." if len(positive) < len(finite) else ""
        notes.append(
            f"{panel.title}: log scale; the values span ×{span} (the largest is {ratio}× the "
            f"median).{zeros}"
        )
    return parts


def _legend_svg(panel: Panel, baseline: float, scale: Scale) -> list[str]:
    heading = panel.heading
    parts = [text(PLOT_LEFT, baseline, heading, weight="bold", size=12)]
    x = PLOT_LEFT + label_width(heading, size=12, bold=True) + 14
    named_by_title = [series.metric for series in panel.series] == [panel.title]
    for series, color in zip(panel.series, LINE_COLORS, strict=False):
        if named_by_title:  # a one-series panel titled with its metric needs no legend
            break
        dash = ' stroke-dasharray="5 3"' if color != LINE_COLORS[0] else ""
        parts.append(
            f'<line x1="{x:.1f}" y1="{baseline - 4:.1f}" x2="{x + 18:.1f}" y2="{baseline - 4:.1f}" '
            f'stroke="{color}" stroke-width="2"{dash}/>'
        )
        parts.append(text(x + 22, baseline, series.metric))
        x += 22 + label_width(series.metric) + 16
    if scale.kind != "linear":
        label = "log scale" if scale.kind == "log" else "axis clipped: ▲ marks values above it"
        if x + label_width(label) < PLOT_RIGHT:  # a long legend wins; the note says it too
            parts.append(text(PLOT_RIGHT, baseline, label, anchor="end", color=MUTED_INK))
    return parts


def _band_svg(
    series: Series,
    x_of: Callable[[float], float],
    y_of: Callable[[float], float],
    color: str,
) -> list[str]:
    """The min-max envelope of each bucket, so a spike inside a bucket stays visible."""
    if all(low == high for low, high in zip(series.lows, series.highs, strict=True)):
        return []
    parts = []
    for run in finite_runs([(lo, hi) for lo, hi in zip(series.lows, series.highs, strict=True)]):
        upper = [f"{x_of(series.steps[i]):.1f},{y_of(series.highs[i] or 0.0):.1f}" for i in run]
        lower = [f"{x_of(series.steps[i]):.1f},{y_of(series.lows[i] or 0.0):.1f}" for i in run]
        points = " ".join(upper + lower[::-1])
        parts.append(
            f'<polygon points="{points}" fill="{color}" fill-opacity="0.18" stroke="none"/>'
        )
    return parts


def _line_svg(
    series: Series,
    x_of: Callable[[float], float],
    y_of: Callable[[float], float],
    color: str,
) -> list[str]:
    dash = ' stroke-dasharray="5 3"' if color != LINE_COLORS[0] else ""
    parts = []
    for run in finite_runs([(value, value) for value in series.values]):
        points = [f"{x_of(series.steps[i]):.1f},{y_of(series.values[i] or 0.0):.1f}" for i in run]
        if len(points) > 1:
            parts.append(
                f'<polyline points="{" ".join(points)}" fill="none" stroke="{color}" '
                f'stroke-width="1.6" stroke-linejoin="round"{dash}/>'
            )
        if len(points) == 1 or len(series.steps) <= SPARSE_POINTS:
            for point in points:
                x, y = point.split(",")
                parts.append(f'<circle cx="{x}" cy="{y}" r="2.5" fill="{color}"/>')
    return parts


def _nonfinite_svg(
    series: Series,
    x_of: Callable[[float], float],
    top: float,
    notes: list[str],
    occupied: list[tuple[float, float]],
) -> list[str]:
    """NaN/Inf cannot sit on an axis: a red ▼ at the panel's top edge marks each such step."""
    steps = [
        step
        for step, *bucket in zip(
            series.steps, series.values, series.lows, series.highs, strict=True
        )
        if any(value is not None and not math.isfinite(value) for value in bucket)
    ]
    if not steps:
        return []
    columns = _distinct_x(steps, x_of)
    parts = [triangle(x, top + 1, NONFINITE_COLOR, pointing_down=True) for x in columns]
    label = _placed_label(x_of(steps[0]), top + 18, "NaN/Inf", NONFINITE_COLOR, occupied)
    if label:
        parts.append(label)
    parts.append(tooltip(f"{series.metric}: non-finite from step {format_step(steps[0])}"))
    notes.append(
        f"{series.metric}: {len(steps)} non-finite point(s) from step {format_step(steps[0])}, "
        "marked ▼ at the top edge of the panel."
    )
    return [f'<g class="nonfinite">{"".join(parts)}</g>']


def _outliers_svg(
    series: Series,
    scale: Scale,
    x_of: Callable[[float], float],
    top: float,
    color: str,
    notes: list[str],
    occupied: list[tuple[float, float]],
) -> list[str]:
    above = [
        (high, step)
        for step, high in zip(series.steps, series.highs, strict=True)
        if high is not None and math.isfinite(high) and high > scale.high
    ]
    if not above:
        return []
    columns = _distinct_x([step for _, step in above], x_of)
    parts = [triangle(x, top + 1, color, pointing_down=False) for x in columns]
    biggest = sorted(above, key=lambda pair: (-pair[0], pair[1]))[:MAX_LABELLED_OUTLIERS]
    for value, step in biggest:
        # Neighbouring outliers ("1010 @ 182", "851 @ 180") would print over each other: a label
        # that has no free room is left out, its value stays in the note and the tooltip.
        content = f"{format_number(value)} @ {format_step(step)}"
        label = _placed_label(x_of(step), top + 12, content, color, occupied)
        if label:
            parts.append(label)
    peak, peak_step = biggest[0]
    parts.append(
        tooltip(f"{series.metric}: {len(above)} point(s) above {format_number(scale.high)}")
    )
    notes.append(
        f"{series.metric}: axis clipped at {format_number(scale.high)}; {len(above)} point(s) "
        f"above it are marked ▲ (largest {format_number(peak)} at step {format_step(peak_step)})."
    )
    return [f'<g class="outlier">{"".join(parts)}</g>']


def _placed_label(
    x: float, y: float, content: str, color: str, occupied: list[tuple[float, float]]
) -> str:
    """A label beside x (left of it near the right edge), or "" when it would overlap another."""
    width = label_width(content)
    anchor_end = x + 6 + width > PLOT_RIGHT
    left = x - 6 - width if anchor_end else x + 6
    right = left + width
    if any(
        left < taken_right + LABEL_GAP and taken_left < right + LABEL_GAP
        for taken_left, taken_right in occupied
    ):
        return ""
    occupied.append((left, right))
    if anchor_end:
        return text(x - 6, y, content, anchor="end", color=color, halo=True)
    return text(x + 6, y, content, color=color, halo=True)


def _distinct_x(steps: Sequence[float], x_of: Callable[[float], float]) -> list[float]:
    """One marker per pixel column: a thousand NaN steps would otherwise be a thousand shapes."""
    return sorted({round(x_of(step)) for step in steps})
