"""Inline SVG charts: stacked metric panels on one shared step axis, incidents shaded, findings
marked, and a zoomed copy around the headline incident.

Written as SVG text here rather than with matplotlib: the HTML stays one self-contained file with
no JavaScript, and case.md links the very same drawing as an image file beside it. Every piece of
text that comes from the logs (metric names, ids) is XML-escaped. Coordinates are written with a
fixed precision so the same payload always gives the same bytes. The panels are drawn by
chart_panels, the marks on the step axis by chart_marks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from itertools import pairwise
from typing import Any

from tscope.model.case import Case
from tscope.model.metric_names import EVAL_LOSS, GRAD_NORM, LEARNING_RATE, LOSS, is_loss_like
from tscope.render.chart_marks import (
    band_svg,
    finding_lines,
    finding_marks,
    hover_columns,
    mark_labels,
    spike_bands,
    spike_marks,
)
from tscope.render.chart_panels import Panel, panel_svg
from tscope.render.chart_style import (
    FINDING_COLOR,
    FRAME,
    GRID,
    LINE_COLORS,
    NONFINITE_COLOR,
    PLOT_LEFT,
    PLOT_RIGHT,
    SPIKE_FILL,
    WIDTH,
    Chart,
)
from tscope.render.formatting import format_step, parse_number
from tscope.render.series import axis_range, nice_ticks, read_series
from tscope.render.svg import svg_document, text

__all__ = [
    "CHART_NAMES",
    "FINDING_COLOR",
    "FRAME",
    "GRID",
    "LINE_COLORS",
    "NONFINITE_COLOR",
    "PLOT_LEFT",
    "PLOT_RIGHT",
    "SPIKE_FILL",
    "WIDTH",
    "Chart",
    "incident_chart",
    "incident_zoom_chart",
    "main_chart_metrics",
    "other_metrics_chart",
]

MARKER_ROW_HEIGHT = 15  # the row of spike / finding ids above the panels
PANEL_TITLE_HEIGHT = 26  # panel title and legend above each panel
AXIS_HEIGHT = 42  # step tick labels and the axis name under the last panel
MAIN_PANEL_HEIGHT = 118
ZOOM_PANEL_HEIGHT = 96
OTHER_PANEL_HEIGHT = 72
MAX_OTHER_PANELS = 12
# The zoomed chart shows this many steps either side of the headline incident's step: enough
# for the lead-up a cause leaves (an LR jump acts within a few steps) and the recovery.
ZOOM_HALF_WIDTH_STEPS = 30
# A long run's chart series is bucketed (one point per ~N steps): the zoom then widens to keep
# this many points either side of the incident rather than show one or none.
ZOOM_MIN_POINTS_EACH_SIDE = 15
# A learning rate spanning more than this factor is drawn on a log axis.
LR_LOG_SPAN = 10.0

# The drawings a case can have: first-screen chart and its zoom, other metrics, heat map; then
# `tscope replay`'s.
CHART_NAMES = ("chart", "zoom", "metrics", "layers", "replay", "whatif", "replay_layers")
# (title, unit, metrics, log above span). Loss is cross-entropy in nats (natural log, as
# PyTorch computes it); the gradient norm is the total L2 norm the trainers log, measured
# before clipping (clip_grad_norm_ returns it); the learning rate is the optimizer's.
MAIN_PANELS: tuple[tuple[str, str, tuple[str, ...], float | None], ...] = (
    ("Loss", "nats", (LOSS, EVAL_LOSS), None),
    ("Gradient norm", "L2, before clipping", (GRAD_NORM,), None),
    ("Learning rate", "", (LEARNING_RATE,), LR_LOG_SPAN),
)
UNITS = {LOSS: "nats", EVAL_LOSS: "nats"}  # written after a value in the hover tooltips


def main_chart_metrics(series_map: dict[str, Any]) -> list[str]:
    """The metrics drawn on the first-screen chart (the rest go to "Other metrics")."""
    return [series.metric for panel in _main_panels(series_map) for series in panel.series]


def incident_chart(case: Case) -> Chart | None:
    """Loss (with eval loss), gradient norm and learning rate, stacked on one step axis."""
    panels = _main_panels(case.chart_series)
    if not panels:
        return None
    title = "Loss, gradient norm and learning rate by optimizer step"
    return _stacked_chart(panels, case, title, MAIN_PANEL_HEIGHT)


def zoom_step(case: Case) -> float | None:
    """The step the zoom centres on: the incident card's, else the headline finding's."""
    summary = case.summary
    step = parse_number(summary.card.step) if summary.card is not None else None
    if step is None:
        headline = summary.headline_finding
        for finding in case.findings:
            if finding.id == headline:
                step = parse_number(finding.step)
    return step


def incident_zoom_chart(case: Case) -> Chart | None:
    """The same panels, ±ZOOM_HALF_WIDTH_STEPS around the headline incident: a one-step spike
    that is a sliver on the full run gets room to be read point by point."""
    centre = zoom_step(case)
    if centre is None:
        return None
    main = _main_panels(case.chart_series)
    half_width = max(ZOOM_HALF_WIDTH_STEPS, ZOOM_MIN_POINTS_EACH_SIDE * _spacing(main))
    first, last = centre - half_width, centre + half_width
    panels = []
    for panel in main:
        inside = tuple(s for s in (series.within(first, last) for series in panel.series) if s)
        if inside:
            panels.append(replace(panel, series=inside))
    if not panels:
        return None
    title = (
        f"Zoom: steps {format_step(first)}–{format_step(last)} around step {format_step(centre)}"
    )
    return _stacked_chart(panels, case, title, ZOOM_PANEL_HEIGHT, x_range=(first, last))


def other_metrics_chart(case: Case) -> Chart | None:
    """Every other charted series, one small panel each, on the same step axis."""
    series_map = case.chart_series
    shown = set(main_chart_metrics(series_map))
    panels = [
        Panel(name, (series,))
        for name in sorted(series_map)
        if name not in shown and (series := read_series(series_map, name)) is not None
    ]
    if not panels:
        return None
    chart = _stacked_chart(
        panels[:MAX_OTHER_PANELS], case, "Other metrics by optimizer step", OTHER_PANEL_HEIGHT
    )
    if len(panels) > MAX_OTHER_PANELS:
        omitted = f"{len(panels) - MAX_OTHER_PANELS} more series are in case.json (chart_series)."
        return Chart(chart.svg, (*chart.notes, omitted))
    return chart


def _stacked_chart(
    panels: Sequence[Panel],
    case: Case,
    title: str,
    panel_height: float,
    x_range: tuple[float, float] | None = None,
) -> Chart:
    all_steps = [step for panel in panels for series in panel.series for step in series.steps]
    x_low, x_high = axis_range(*(x_range or (min(all_steps), max(all_steps))))

    def x_of(step: float) -> float:
        return PLOT_LEFT + (step - x_low) / (x_high - x_low) * (PLOT_RIGHT - PLOT_LEFT)

    top = MARKER_ROW_HEIGHT + 8
    panel_tops = [
        top + PANEL_TITLE_HEIGHT + index * (PANEL_TITLE_HEIGHT + panel_height)
        for index in range(len(panels))
    ]
    bottom = panel_tops[-1] + panel_height
    height = bottom + AXIS_HEIGHT

    bands = spike_bands(case, x_of, x_low, x_high)
    marks = spike_marks(case, bands, x_of) + finding_marks(case, x_of, x_low, x_high)
    body: list[str] = band_svg(bands, panel_tops, panel_height)
    # Each finding's line runs from its label through every panel, skipping the title rows below
    # the first so that it never strikes through a panel's legend.
    segments: list[tuple[float, float]] = [(top - 2, panel_tops[0] + panel_height)]
    segments += [(panel_top, panel_top + panel_height) for panel_top in panel_tops[1:]]
    body.extend(finding_lines(marks, segments))
    notes: list[str] = []
    x_ticks = nice_ticks(x_low, x_high, target=8, integer=True)
    for panel, panel_top in zip(panels, panel_tops, strict=True):
        body.extend(panel_svg(panel, panel_top, panel_height, x_of, x_ticks, notes))
    body.extend(mark_labels(marks, MARKER_ROW_HEIGHT))
    for step in x_ticks:
        body.append(text(x_of(step), bottom + 15, format_step(step), anchor="middle"))
    body.append(text((PLOT_LEFT + PLOT_RIGHT) / 2, bottom + 34, "optimizer step", anchor="middle"))
    body.extend(hover_columns(panels, x_of, panel_tops[0], bottom, UNITS))
    return Chart(svg_document(WIDTH, height, title, body), tuple(notes))


def _main_panels(series_map: dict[str, Any]) -> list[Panel]:
    panels = []
    for title, unit, metrics, log_span in MAIN_PANELS:
        series = [s for s in (read_series(series_map, m) for m in metrics) if s is not None]
        if series:
            panels.append(Panel(title, tuple(series), unit, log_span))
    if panels:
        return panels
    # No canonical series (an unusual logger): chart the first loss-like series found instead.
    fallback = sorted(series_map, key=lambda name: (not is_loss_like(name), name))[:3]
    found = [(name, read_series(series_map, name)) for name in fallback]
    return [Panel(name, (series,)) for name, series in found if series is not None]


def _spacing(panels: Sequence[Panel]) -> float:
    """The median step distance between charted points of the first series (1 when unknown)."""
    steps = panels[0].series[0].steps if panels and panels[0].series else ()
    gaps = sorted(b - a for a, b in pairwise(steps) if b > a)
    return gaps[len(gaps) // 2] if gaps else 1.0
