"""The plot box the replay charts share: a pixel box with its step range and y scale, grid and
axes, lines broken at NaN/Inf, dots, step markers and legend entries.

Coordinates are written with one decimal so the same payload always gives the same bytes; every
label goes through tscope.render.svg, which escapes it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tscope.render.charts import FRAME, GRID, NONFINITE_COLOR
from tscope.render.formatting import format_number, format_step
from tscope.render.series import (
    LOG_PADDING,
    Scale,
    axis_range,
    choose_scale,
    finite_runs,
    is_finite,
    nice_ticks,
    ticks_for,
)
from tscope.render.svg import CHAR_WIDTH, line, rect, text, triangle

# A log axis for a statistic that prefers one (norms, ratios) once its values span this factor.
LOG_SPAN = 100.0
X_TICK_TARGET = 8
MIN_Y_TICKS = 3  # a panel with fewer labelled values is hard to read: ask for denser ticks
DOT_ROOM_STEPS = 200  # up to this many steps, each point has room for a dot: pad the ends
MARK_COLOR = "#6a1b9a"  # the `around` step: the purple of findings on the main chart
WINDOW_FILL = "#5e5e5e"


@dataclass(frozen=True)
class Box:
    """Where the data goes: pixels left/right/top/height, the step range and the y scale."""

    left: float
    right: float
    top: float
    height: float
    x_low: float
    x_high: float
    scale: Scale

    @property
    def bottom(self) -> float:
        return self.top + self.height

    def x(self, step: float) -> float:
        span = self.x_high - self.x_low
        return self.left + (step - self.x_low) / span * (self.right - self.left)

    def y(self, value: float) -> float:
        return self.bottom - self.scale.fraction(value) * self.height

    def holds(self, step: float) -> bool:
        return self.x_low <= step <= self.x_high


def step_range(steps: Sequence[float]) -> tuple[float, float]:
    """The x range: half a step of room either side, so end points and bands are not cut."""
    low, high = min(steps), max(steps)
    if not high - low > 0:  # one step (or steps no float tells apart): a width above 0.0
        return axis_range(low, high)
    margin = 0.5 if high - low <= DOT_ROOM_STEPS else 0.0
    return low - margin, high + margin


def value_scale(finite: Sequence[float], log_preferred: bool = False) -> Scale:
    """choose_scale; and log where the measure prefers it and positive values span decades."""
    if log_preferred and finite and min(finite) > 0 and max(finite) > LOG_SPAN * min(finite):
        return Scale("log", min(finite) / LOG_PADDING, max(finite) * LOG_PADDING)
    return choose_scale(finite)


def grid(box: Box) -> list[str]:
    """Step grid lines, value grid lines and the value tick labels left of the box."""
    parts = [line(box.x(step), box.top, box.x(step), box.bottom, GRID) for step in x_ticks(box)]
    ticks = ticks_for(box.scale)
    if box.scale.kind != "log" and len(ticks) < MIN_Y_TICKS:
        ticks = nice_ticks(box.scale.low, box.scale.high, target=2 * MIN_Y_TICKS)
    for tick in ticks:
        parts.append(line(box.left, box.y(tick), box.right, box.y(tick), GRID))
        parts.append(text(box.left - 6, box.y(tick) + 4, format_number(tick), anchor="end"))
    return parts


def frame(box: Box) -> str:
    stroke = f'stroke="{FRAME}" stroke-width="1"'
    return rect(box.left, box.top, box.right - box.left, box.height, "none", stroke)


def x_ticks(box: Box) -> list[float]:
    return nice_ticks(box.x_low, box.x_high, target=X_TICK_TARGET, integer=True)


def x_labels(box: Box, axis_name: str = "") -> list[str]:
    """Step numbers under the box, and the axis name under them when given."""
    parts = [
        text(box.x(step), box.bottom + 14, format_step(step), anchor="middle")
        for step in x_ticks(box)
    ]
    if axis_name:
        centre = (box.left + box.right) / 2
        parts.append(text(centre, box.bottom + 32, axis_name, anchor="middle"))
    return parts


def polyline(
    box: Box,
    steps: Sequence[float],
    values: Sequence[float | None],
    color: str,
    width: float = 1.6,
    dash: str = "",
) -> list[str]:
    """A curve broken at gaps and NaN/Inf; an isolated point becomes a dot."""
    dash_attribute = f' stroke-dasharray="{dash}"' if dash else ""
    parts = []
    for run in finite_runs([(value, value) for value in values]):
        points = [f"{box.x(steps[i]):.1f},{box.y(values[i] or 0.0):.1f}" for i in run]
        if len(points) == 1:
            x, y = points[0].split(",")
            parts.append(f'<circle cx="{x}" cy="{y}" r="2" fill="{color}"/>')
            continue
        parts.append(
            f'<polyline points="{" ".join(points)}" fill="none" stroke="{color}" '
            f'stroke-width="{width:.1f}" stroke-linejoin="round"{dash_attribute}/>'
        )
    return parts


def dots(
    box: Box, steps: Sequence[float], values: Sequence[float | None], color: str, radius: float
) -> list[str]:
    return [
        f'<circle cx="{box.x(step):.1f}" cy="{box.y(value):.1f}" r="{radius:.1f}" '
        f'fill="#ffffff" stroke="{color}" stroke-width="1.5"/>'
        for step, value in zip(steps, values, strict=True)
        if value is not None and is_finite(value)
    ]


def nonfinite_marks(box: Box, steps: Sequence[float], values: Sequence[float | None]) -> list[str]:
    """NaN/Inf cannot sit on an axis: a red ▼ at the box's top edge, one per pixel column."""
    columns = sorted(
        {
            round(box.x(step))
            for step, value in zip(steps, values, strict=True)
            if value is not None and not math.isfinite(value)
        }
    )
    marks = [triangle(x, box.top + 1, NONFINITE_COLOR, pointing_down=True) for x in columns]
    return [f'<g class="nonfinite">{"".join(marks)}</g>'] if marks else []


def step_mark(box: Box, step: float, color: str = MARK_COLOR) -> str:
    """A dashed vertical line through the box at `step`."""
    x = box.x(step)
    return line(x, box.top, x, box.bottom, color, dash="4 3")


def window_band(box: Box, first: float, last: float) -> str:
    """A light band over the steps first..last (half a step either side, clamped to the box)."""
    left = max(box.left, box.x(first - 0.5))
    right = min(box.right, box.x(last + 0.5))
    return rect(
        left, box.top, max(right - left, 0.0), box.height, WINDOW_FILL, 'fill-opacity="0.08"'
    )


def horizontal(box: Box, value: float, color: str, dash: str = "6 3") -> str:
    return line(box.left, box.y(value), box.right, box.y(value), color, dash=dash)


def legend_entry(
    x: float, baseline: float, color: str, label: str, kind: str = "line", dash: str = ""
) -> tuple[list[str], float]:
    """A swatch (line, dashed line or hollow dot) and its label; returns the parts and the x
    where the next entry may start."""
    y = baseline - 4
    if kind == "dot":
        swatch = (
            f'<circle cx="{x + 9:.1f}" cy="{y:.1f}" r="3" fill="#ffffff" stroke="{color}" '
            'stroke-width="1.5"/>'
        )
    else:
        dash_attribute = f' stroke-dasharray="{dash}"' if dash else ""
        swatch = (
            f'<line x1="{x:.1f}" y1="{y:.1f}" x2="{x + 18:.1f}" y2="{y:.1f}" stroke="{color}" '
            f'stroke-width="2"{dash_attribute}/>'
        )
    parts = [swatch, text(x + 22, baseline, label)]
    return parts, x + 22 + len(label) * CHAR_WIDTH + 16
