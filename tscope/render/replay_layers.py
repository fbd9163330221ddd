"""Per-layer statistics of the replay, one small panel per statistic, one line per layer.

`replay.layer_series` in case.json holds {statistic: {"layers": [...], "steps": [...], "values":
[[...]]}}, values layers × steps (null where a layer was not measured). Each panel colours the
layers with the largest values and draws the others in grey, so the layer that moves first stands
out; layer names come from the user's model and are escaped like every other label.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tscope.model.replay_section import LayerSeries, ReplaySection
from tscope.model.replay_statistics import ReplayStatistic
from tscope.render.charts import PLOT_LEFT, WIDTH, Chart
from tscope.render.formatting import parse_number
from tscope.render.replay_names import MAX_CHARTED_STATISTICS
from tscope.render.replay_plot import (
    Box,
    frame,
    grid,
    polyline,
    step_mark,
    step_range,
    value_scale,
    x_labels,
)
from tscope.render.series import is_finite
from tscope.render.svg import CHAR_WIDTH, line, svg_document, text, tooltip

LABELLED_LAYERS = 8  # coloured and named per panel; the rest are grey
# Lines drawn per panel: the layers with the largest values, each over at most MAX_DRAWN_STEPS
# steps (every k-th). A crafted case.json of 1,000 layers × 600 steps drew a 14 MB SVG in 0.4 GB;
# every layer's values stay in case.json and replay_layers.parquet.
MAX_DRAWN_LAYERS = 64
MAX_DRAWN_STEPS = 300
# Eight colours distinct on white and for most colour-blind readers (tab10 less grey and olive).
LAYER_COLORS = (
    "#1f77b4",
    "#d62728",
    "#2ca02c",
    "#ff7f0e",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#17becf",
)
OTHER_LAYER_COLOR = "#c4c4c4"
LEGEND_WIDTH = 290  # the layer names right of each panel
PLOT_RIGHT = WIDTH - LEGEND_WIDTH - 24
LEGEND_LEFT = PLOT_RIGHT + 16
LEGEND_LINE = 12.5
TITLE_ROW = 26
PANEL_HEIGHT = 100
STEP_LABELS = 20
AXIS_NAME = 20
PANEL_GAP = 12


@dataclass(frozen=True)
class LayerStatistic:
    name: str
    layers: tuple[str, ...]  # largest peak first, then by name
    steps: tuple[float, ...]
    values: tuple[tuple[float | None, ...], ...]  # layers × steps, in `layers` order

    def peak(self, row: int) -> tuple[float, int] | None:
        """The layer's value of largest magnitude and its column; None when none is finite."""
        finite = [(v, i) for i, v in enumerate(self.values[row]) if v is not None and is_finite(v)]
        if not finite:
            return None
        return max(finite, key=lambda pair: (abs(pair[0]), -pair[1]))


def read_layer_series(
    series: Mapping[str, LayerSeries], key_statistics: Sequence[str]
) -> list[LayerStatistic]:
    """Every statistic in `layer_series`, the key ones first (in `key_statistics` order), then by
    name."""
    found = []
    for name in sorted(series, key=lambda name: _statistic_order(name, key_statistics)):
        entry = series[name]
        steps = [parse_number(step) for step in entry.steps]
        layers = list(entry.layers)
        rows = entry.values[: len(layers)]
        keep = [i for i, step in enumerate(steps) if step is not None and math.isfinite(step)]
        if not keep or not rows:
            continue
        matrix = []
        for row in rows:
            values = [parse_number(value) for value in row]
            matrix.append(tuple(values[i] if i < len(values) else None for i in keep))
        found.append(_ranked(str(name), layers, tuple(steps[i] or 0.0 for i in keep), matrix))
    return found


def charted_statistics(
    found: Sequence[LayerStatistic], key_statistics: Sequence[str]
) -> list[LayerStatistic]:
    """The key statistics present; a run without any gets its first few instead."""
    key = [item for item in found if item.name in key_statistics]
    return key or list(found[:MAX_CHARTED_STATISTICS])


def layer_statistics_chart(section: ReplaySection | None) -> Chart | None:
    if section is None:
        return None
    key_statistics = section.key_statistics()
    found = read_layer_series(section.layer_series, key_statistics)
    shown = charted_statistics(found, key_statistics)
    if not shown:
        return None
    around = parse_number(section.around)
    body: list[str] = []
    top = 4.0
    for index, item in enumerate(shown):
        last = index == len(shown) - 1
        top = _panel(body, top, item, section.statistic(item.name), around, axis_name=last)
    notes = []
    measured = max(len(section.layer_series[item.name].layers) for item in shown)
    if measured > MAX_DRAWN_LAYERS:
        notes.append(
            f"Each panel draws the {MAX_DRAWN_LAYERS} layers with the largest values of the "
            f"{measured:,} measured."
        )
    greyed = max(len(item.layers) for item in shown) - LABELLED_LAYERS
    if greyed > 0:
        notes.append(
            f"Each panel names the {LABELLED_LAYERS} layers with the largest values; the others "
            "are grey. Every layer's values are in replay_layers.parquet."
        )
    charted = {item.name for item in shown}
    others = [item.name for item in found if item.name not in charted]
    if others:
        notes.append(f"Also measured, not charted: {', '.join(others)} (see the table below).")
    title = "Per-layer statistics of the replayed steps"
    return Chart(svg_document(WIDTH, top, title, body), tuple(notes))


def _panel(
    body: list[str],
    top: float,
    item: LayerStatistic,
    described: ReplayStatistic,
    around: float | None,
    axis_name: bool,
) -> float:
    """Draw one statistic from `top`; returns where the next panel may start."""
    finite = [v for row in item.values for v in row if v is not None and math.isfinite(v)]
    scale = value_scale(finite, described.log_preferred)
    x_low, x_high = step_range(item.steps)
    box = Box(PLOT_LEFT, PLOT_RIGHT, top + TITLE_ROW, PANEL_HEIGHT, x_low, x_high, scale)
    heading = f"{described.title} per layer"
    body.append(text(PLOT_LEFT, top + 17, heading, weight="bold", size=12))
    unit = described.unit
    if scale.kind != "linear":
        unit += " · log scale" if scale.kind == "log" else " · axis clipped"
    unit_x = PLOT_LEFT + len(heading) * CHAR_WIDTH * 1.15 + 10
    room = int((PLOT_RIGHT - unit_x) / CHAR_WIDTH)  # characters that fit before the legend
    if len(unit) > room:
        unit = unit[: max(room - 1, 0)] + "…" if room > 1 else ""
    body.append(text(unit_x, top + 17, unit, color="#555555"))
    body.append(text(LEGEND_LEFT, top + 17, _shorten(item.name), color="#555555"))
    body.extend(grid(box))
    for row in range(len(item.layers) - 1, -1, -1):  # the named layers drawn last, on top
        named = row < LABELLED_LAYERS
        color = LAYER_COLORS[row] if named else OTHER_LAYER_COLOR
        parts = polyline(box, item.steps, item.values[row], color, 1.6 if named else 1.0)
        if parts:
            body.append(f'<g class="layer">{tooltip(item.layers[row])}{"".join(parts)}</g>')
    if around is not None and box.holds(around):
        body.append(step_mark(box, around))
    body.append(frame(box))
    legend_bottom = _legend(body, box.top, item)
    body.extend(x_labels(box, "optimizer step" if axis_name else ""))
    bottom = max(box.bottom + STEP_LABELS + (AXIS_NAME if axis_name else 0), legend_bottom)
    return bottom + PANEL_GAP


def _legend(body: list[str], top: float, item: LayerStatistic) -> float:
    """The named layers' colours and names right of the panel; returns the bottom it reached."""
    baseline = top + 9
    for row, name in enumerate(item.layers[:LABELLED_LAYERS]):
        y = baseline - 4
        swatch = (
            f'<line x1="{LEGEND_LEFT:.1f}" y1="{y:.1f}" x2="{LEGEND_LEFT + 16:.1f}" y2="{y:.1f}" '
            f'stroke="{LAYER_COLORS[row]}" stroke-width="2.5"/>'
        )
        label = text(LEGEND_LEFT + 20, baseline, _shorten(name))
        body.append(f"<g>{tooltip(name)}{swatch}{label}</g>")
        baseline += LEGEND_LINE
    rest = len(item.layers) - LABELLED_LAYERS
    if rest > 0:
        y = baseline - 4
        body.append(line(LEGEND_LEFT, y, LEGEND_LEFT + 16, y, OTHER_LAYER_COLOR))
        body.append(text(LEGEND_LEFT + 20, baseline, f"{rest} more layers", color="#555555"))
        baseline += LEGEND_LINE
    return baseline


def _ranked(
    name: str, layers: list[str], steps: tuple[float, ...], matrix: list[tuple[float | None, ...]]
) -> LayerStatistic:
    """Layers ordered by their value of largest magnitude (all-missing rows last), then by name."""

    def key(row: int) -> tuple[float, str]:
        finite = [abs(v) for v in matrix[row] if v is not None and is_finite(v)]
        return (-max(finite) if finite else math.inf, layers[row])

    order = sorted(range(len(matrix)), key=key)[:MAX_DRAWN_LAYERS]
    every = max(1, -(-len(steps) // MAX_DRAWN_STEPS))  # every k-th step: ≤ MAX_DRAWN_STEPS
    columns = range(0, len(steps), every)
    return LayerStatistic(
        name=name,
        layers=tuple(layers[row] for row in order),
        steps=tuple(steps[i] for i in columns),
        values=tuple(tuple(matrix[row][i] for i in columns) for row in order),
    )


def _statistic_order(name: Any, key_statistics: Sequence[str]) -> tuple[int, str]:
    text_name = str(name)
    if text_name in key_statistics:
        return (list(key_statistics).index(text_name), text_name)
    return (len(key_statistics), text_name)


def _shorten(name: str) -> str:
    """Keep the end of a long layer name: "…layers.11.mlp.down_proj" says more than the start."""
    limit = int((WIDTH - 20 - LEGEND_LEFT - 20) / CHAR_WIDTH)
    return name if len(name) <= limit else "…" + name[-(limit - 1) :]
