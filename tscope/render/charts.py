"""Inline SVG charts: stacked metric panels on one shared step axis, spikes shaded, findings marked.

Written as SVG text here rather than with matplotlib: the HTML stays one self-contained file with
no JavaScript, and case.md links the very same drawing as an image file beside it. Every piece of
text that comes from the logs (metric names, ids) is XML-escaped. Coordinates are written with a
fixed precision so the same payload always gives the same bytes.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from tscope.model.metric_names import EVAL_LOSS, GRAD_NORM, LEARNING_RATE, LOSS, is_loss_like
from tscope.render.formatting import format_number, format_step, parse_number
from tscope.render.series import (
    Scale,
    Series,
    as_list,
    choose_scale,
    finite_runs,
    nice_ticks,
    read_series,
    ticks_for,
)
from tscope.render.svg import CHAR_WIDTH, line, rect, svg_document, text, triangle, xml_text

WIDTH = 960
PLOT_LEFT = 84  # room for y tick labels such as "1.23e-4"
PLOT_RIGHT = WIDTH - 20
MARKER_ROW_HEIGHT = 15  # the row of spike / finding ids above the panels
PANEL_TITLE_HEIGHT = 26  # panel title and legend above each panel
AXIS_HEIGHT = 42  # step tick labels and the axis name under the last panel
MAIN_PANEL_HEIGHT = 118
OTHER_PANEL_HEIGHT = 72
MAX_OTHER_PANELS = 12
MAX_LABELLED_OUTLIERS = 3
SPARSE_POINTS = 60  # a series this short (eval loss) gets a dot per point: the line only joins them
GRID = "#e3e3e3"
FRAME = "#9a9a9a"
# Dark blue for the main series, orange for the overlay (eval loss): distinct for colour-blind
# readers and still two different greys when printed black and white.
LINE_COLORS = ("#1f4e99", "#c05600")
SPIKE_FILL = "#d62728"
FINDING_COLOR = "#6a1b9a"
NONFINITE_COLOR = "#c62828"

# The drawings a case can have: first-screen chart, other metrics, heat map; then `tscope replay`'s.
CHART_NAMES = ("chart", "metrics", "layers", "replay", "whatif", "replay_layers")
MAIN_PANELS = (
    ("Loss", (LOSS, EVAL_LOSS)),
    ("Gradient norm", (GRAD_NORM,)),
    ("Learning rate", (LEARNING_RATE,)),
)


@dataclass(frozen=True)
class Chart:
    svg: str
    notes: tuple[str, ...]  # what a reader must know to read it right: scales, clipping, NaN


@dataclass(frozen=True)
class Panel:
    title: str
    series: tuple[Series, ...]


def main_chart_metrics(series_map: dict[str, Any]) -> list[str]:
    """The metrics drawn on the first-screen chart (the rest go to "Other metrics")."""
    return [series.metric for panel in _main_panels(series_map) for series in panel.series]


def incident_chart(payload: dict[str, Any]) -> Chart | None:
    """Loss (with eval loss), gradient norm and learning rate, stacked on one step axis."""
    panels = _main_panels(_series_map(payload))
    if not panels:
        return None
    title = "Loss, gradient norm and learning rate by optimizer step"
    return _stacked_chart(panels, payload, title, MAIN_PANEL_HEIGHT)


def other_metrics_chart(payload: dict[str, Any]) -> Chart | None:
    """Every other charted series, one small panel each, on the same step axis."""
    series_map = _series_map(payload)
    shown = set(main_chart_metrics(series_map))
    panels = [
        Panel(name, (series,))
        for name in sorted(series_map)
        if name not in shown and (series := read_series(series_map, name)) is not None
    ]
    if not panels:
        return None
    chart = _stacked_chart(
        panels[:MAX_OTHER_PANELS], payload, "Other metrics by optimizer step", OTHER_PANEL_HEIGHT
    )
    if len(panels) > MAX_OTHER_PANELS:
        omitted = f"{len(panels) - MAX_OTHER_PANELS} more series are in case.json (chart_series)."
        return Chart(chart.svg, (*chart.notes, omitted))
    return chart


def _stacked_chart(
    panels: Sequence[Panel], payload: dict[str, Any], title: str, panel_height: float
) -> Chart:
    all_steps = [step for panel in panels for series in panel.series for step in series.steps]
    x_low, x_high = min(all_steps), max(all_steps)
    if x_high == x_low:
        x_low, x_high = x_low - 1, x_high + 1

    def x_of(step: float) -> float:
        return PLOT_LEFT + (step - x_low) / (x_high - x_low) * (PLOT_RIGHT - PLOT_LEFT)

    labels = _marker_labels(payload, x_of, x_low, x_high)
    top = MARKER_ROW_HEIGHT + 8
    panel_tops = [
        top + PANEL_TITLE_HEIGHT + index * (PANEL_TITLE_HEIGHT + panel_height)
        for index in range(len(panels))
    ]
    bottom = panel_tops[-1] + panel_height
    height = bottom + AXIS_HEIGHT

    body: list[str] = []
    for spike_left, spike_right in _spike_spans(payload, x_of, x_low, x_high):
        for panel_top in panel_tops:
            width = spike_right - spike_left
            shade = 'class="spike" fill-opacity="0.13"'
            body.append(rect(spike_left, panel_top, width, panel_height, SPIKE_FILL, shade))
    # Each finding's line runs from its label through every panel, skipping the title rows below
    # the first so that it never strikes through a panel's legend.
    segments: list[tuple[float, float]] = [(top - 2, panel_tops[0] + panel_height)]
    segments += [(panel_top, panel_top + panel_height) for panel_top in panel_tops[1:]]
    for x in sorted({round(x_of(step), 1) for step in _finding_steps(payload, x_low, x_high)}):
        for upper, lower in segments:
            body.append(line(x, upper, x, lower, FINDING_COLOR, dash="4 3"))
    notes: list[str] = []
    x_ticks = nice_ticks(x_low, x_high, target=8, integer=True)
    for panel, panel_top in zip(panels, panel_tops, strict=True):
        body.extend(_panel_svg(panel, panel_top, panel_height, x_of, x_ticks, notes))
    body.extend(labels)
    for step in x_ticks:
        body.append(text(x_of(step), bottom + 15, format_step(step), anchor="middle"))
    body.append(text((PLOT_LEFT + PLOT_RIGHT) / 2, bottom + 34, "optimizer step", anchor="middle"))
    return Chart(svg_document(WIDTH, height, title, body), tuple(notes))


def _panel_svg(
    panel: Panel,
    top: float,
    height: float,
    x_of: Callable[[float], float],
    x_ticks: Sequence[float],
    notes: list[str],
) -> list[str]:
    scale = choose_scale([v for series in panel.series for v in series.finite_points()])
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
    for series, color in zip(panel.series, LINE_COLORS, strict=False):
        parts.extend(_nonfinite_svg(series, x_of, top, notes))
        if scale.kind == "clipped":
            parts.extend(_outliers_svg(series, scale, x_of, top, color, notes))
    frame = f'stroke="{FRAME}" stroke-width="1"'
    parts.append(rect(PLOT_LEFT, top, PLOT_RIGHT - PLOT_LEFT, height, "none", frame))
    parts.extend(_legend_svg(panel, top - 8, scale))
    if scale.kind == "log":
        finite = [v for series in panel.series for v in series.finite_points()]
        ratio = format_number(max(finite) / statistics.median(finite))
        notes.append(f"{panel.title}: log scale; the largest value is {ratio}× the median.")
    return parts


def _legend_svg(panel: Panel, baseline: float, scale: Scale) -> list[str]:
    parts = [text(PLOT_LEFT, baseline, panel.title, weight="bold", size=12)]
    x = PLOT_LEFT + len(panel.title) * CHAR_WIDTH * 1.15 + 14
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
        x += 22 + len(series.metric) * CHAR_WIDTH + 16
    if scale.kind != "linear":
        label = "log scale" if scale.kind == "log" else "axis clipped: ▲ marks values above it"
        parts.append(text(PLOT_RIGHT, baseline, label, anchor="end", color="#555555"))
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
    series: Series, x_of: Callable[[float], float], top: float, notes: list[str]
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
    first_x = x_of(steps[0])
    anchor = "end" if first_x > PLOT_RIGHT - 60 else "start"
    label_x = first_x - 6 if anchor == "end" else first_x + 6
    parts.append(
        text(label_x, top + 18, "NaN/Inf", anchor=anchor, color=NONFINITE_COLOR, halo=True)
    )
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
        label = f"{format_number(value)} @ {format_step(step)}"
        anchor = "end" if x_of(step) > PLOT_RIGHT - 90 else "start"
        offset = -6 if anchor == "end" else 6
        parts.append(
            text(x_of(step) + offset, top + 12, label, anchor=anchor, color=color, halo=True)
        )
    peak, peak_step = biggest[0]
    notes.append(
        f"{series.metric}: axis clipped at {format_number(scale.high)}; {len(above)} point(s) "
        f"above it are marked ▲ (largest {format_number(peak)} at step {format_step(peak_step)})."
    )
    return [f'<g class="outlier">{"".join(parts)}</g>']


def _marker_labels(
    payload: dict[str, Any], x_of: Callable[[float], float], x_low: float, x_high: float
) -> list[str]:
    """Spike ids (at onset) and finding ids (at their step) in one row above the panels. Ids
    whose labels would overlap are written as one group, "S1 F2 F3", centred on their steps."""
    wanted: list[tuple[float, int, str, str]] = []  # x, spikes before findings, id, colour
    for spike in _dicts(payload.get("spikes")):
        onset = parse_number(spike.get("onset_step"))
        if onset is not None and x_low <= onset <= x_high and spike.get("id"):
            wanted.append((x_of(onset), 0, str(spike["id"]), SPIKE_FILL))
    for finding in _dicts(payload.get("findings")):
        step = parse_number(finding.get("step"))
        if step is not None and x_low <= step <= x_high and finding.get("id"):
            wanted.append((x_of(step), 1, str(finding["id"]), FINDING_COLOR))
    groups: list[list[tuple[float, int, str, str]]] = []
    for item in sorted(wanted):
        if groups and item[0] - _group_extent(groups[-1])[1] < _label_width(item[2]) / 2 + 4:
            groups[-1].append(item)
        else:
            groups.append([item])
    parts = []
    for group in groups:
        left, right = _group_extent(group)
        spans = [
            f'<tspan fill="{colour}">{xml_text(label)}{" " if index < len(group) - 1 else ""}'
            "</tspan>"
            for index, (_, _, label, colour) in enumerate(group)
        ]
        parts.append(
            f'<text x="{(left + right) / 2:.1f}" y="{MARKER_ROW_HEIGHT:.1f}" '
            f'text-anchor="middle" font-weight="bold">{"".join(spans)}</text>'
        )
    return parts


def _group_extent(group: Sequence[tuple[float, int, str, str]]) -> tuple[float, float]:
    """Left and right pixel edge of a group's label, centred on its ids' steps, kept in the plot."""
    width = sum(_label_width(label) for _, _, label, _ in group) + CHAR_WIDTH * (len(group) - 1)
    centre = sum(x for x, _, _, _ in group) / len(group)
    centre = min(max(centre, PLOT_LEFT + width / 2), PLOT_RIGHT - width / 2)
    return centre - width / 2, centre + width / 2


def _label_width(label: str) -> float:
    return len(label) * CHAR_WIDTH * 1.1  # bold glyphs run about 10 % wider


def _spike_spans(
    payload: dict[str, Any], x_of: Callable[[float], float], x_low: float, x_high: float
) -> list[tuple[float, float]]:
    """Each spike's onset-to-end as pixels; an unrecovered spike runs to the end of the chart."""
    spans = []
    for spike in _dicts(payload.get("spikes")):
        onset = parse_number(spike.get("onset_step"))
        end = parse_number(spike.get("end_step"))
        if onset is None:
            continue
        end = x_high if end is None else end
        left, right = x_of(max(onset, x_low)), x_of(min(max(end, onset), x_high))
        if right - left < 3:  # a one-step spike still needs a visible band
            left, right = left - 1.5, right + 1.5
        spans.append((left, right))
    return spans


def _finding_steps(payload: dict[str, Any], x_low: float, x_high: float) -> list[float]:
    steps = [parse_number(finding.get("step")) for finding in _dicts(payload.get("findings"))]
    return [step for step in steps if step is not None and x_low <= step <= x_high]


def _main_panels(series_map: dict[str, Any]) -> list[Panel]:
    panels = []
    for title, metrics in MAIN_PANELS:
        series = [s for s in (read_series(series_map, m) for m in metrics) if s is not None]
        if series:
            panels.append(Panel(title, tuple(series)))
    if panels:
        return panels
    # No canonical series (an unusual logger): chart the first loss-like series found instead.
    fallback = sorted(series_map, key=lambda name: (not is_loss_like(name), name))[:3]
    found = [(name, read_series(series_map, name)) for name in fallback]
    return [Panel(name, (series,)) for name, series in found if series is not None]


def _distinct_x(steps: Sequence[float], x_of: Callable[[float], float]) -> list[float]:
    """One marker per pixel column: a thousand NaN steps would otherwise be a thousand shapes."""
    return sorted({round(x_of(step)) for step in steps})


def _series_map(payload: dict[str, Any]) -> dict[str, Any]:
    value = payload.get("chart_series")
    return value if isinstance(value, dict) else {}


def _dicts(value: Any) -> list[dict[str, Any]]:
    return [item for item in as_list(value) if isinstance(item, dict)]
