"""The per-layer heat map: layers down, checkpoint steps across, one block per measure.

`layers` in case.json holds {"steps": [...], "names": [...], "update_ratio": [[...]],
"norm_growth": [[...]]}, each matrix names × steps. Darker is larger. A measure spanning more than
two decades gets a log colour scale, otherwise one outlier layer would leave every other cell pale.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from tscope.model.case_parts import HEATMAP_MAX_LAYERS, LayerHeatmap
from tscope.render.charts import WIDTH, Chart
from tscope.render.formatting import format_number, format_step, parse_number
from tscope.render.series import nice_ticks
from tscope.render.svg import CHAR_WIDTH, rect, svg_document, text, tooltip

MEASURES = (
    ("update_ratio", "Update-to-weight ratio"),
    ("norm_growth", "Weight-norm growth"),
)
LABEL_WIDTH = 250  # layer names such as "…layers.11.self_attn.q_proj.weight"
RIGHT_MARGIN = 20
BLOCK_TITLE_HEIGHT = 30
STEP_LABEL_HEIGHT = 20
LEGEND_HEIGHT = 40
BLOCK_GAP = 16
MIN_ROW_HEIGHT = 4.0
MAX_ROW_HEIGHT = 16.0
TARGET_BLOCK_HEIGHT = 360.0  # rows shrink toward MIN_ROW_HEIGHT to keep a block near this
LABEL_SPACING = 11.0  # px between row labels: fewer labels than rows when rows are thin
LOG_COLOUR_DECADES = 2.0
# Pale yellow to dark red: ordered by lightness, so the order survives grey printing.
RAMP = ((255, 247, 230), (253, 212, 158), (252, 141, 89), (215, 48, 31), (127, 0, 0))
NOT_MEASURED = "#eeeeee"
NONFINITE = "#111111"
LEGEND_CELLS = 24
# Columns drawn at most (checkpoint steps); rows are capped as analyze caps them.
HEATMAP_MAX_STEPS = 120


def layers_heatmap(layers: LayerHeatmap | None) -> Chart | None:
    if layers is None:
        return None
    steps = [parse_number(step) for step in layers.steps]
    names = list(layers.names)
    notes: list[str] = []
    # A case.json given to `tscope report` may come from anyone: the map draws what analyze would
    # (a 2,000 × 2,000 matrix in 16 MB of case.json drew 555 MB of SVG in 3.3 GB of memory).
    if len(names) > HEATMAP_MAX_LAYERS:
        notes.append(f"the first {HEATMAP_MAX_LAYERS} of {len(names):,} layers drawn")
        names = names[:HEATMAP_MAX_LAYERS]
    columns = _drawn_columns(len(steps))
    if len(columns) < len(steps):
        notes.append(f"{len(columns)} of {len(steps):,} checkpoint steps drawn, evenly spaced")
    blocks = [
        (title, _columns(_matrix(layers.measure(key), len(names), len(steps)), columns))
        for key, title in MEASURES
        if layers.measure(key)
    ]
    steps = [steps[i] for i in columns]
    if not steps or not names or not blocks:
        return None
    body: list[str] = []
    top = 8.0
    for title, matrix in blocks:
        top = _block_svg(body, notes, top, title, names, steps, matrix)
    return Chart(svg_document(WIDTH, top, "Per-layer heat map", body), tuple(notes))


def _block_svg(
    body: list[str],
    notes: list[str],
    top: float,
    title: str,
    names: Sequence[str],
    steps: Sequence[float | None],
    matrix: list[list[float | None]],
) -> float:
    """Draw one measure's block from `top`; returns where the next block may start."""
    finite = [v for row in matrix for v in row if v is not None and math.isfinite(v)]
    log_scale = (
        bool(finite) and min(finite) > 0 and max(finite) / min(finite) > 10**LOG_COLOUR_DECADES
    )
    low, high = (min(finite), max(finite)) if finite else (0.0, 1.0)
    scale_label = "log colour scale" if log_scale else "linear colour scale"
    body.append(text(8, top + 18, f"{title} per layer ({scale_label})", weight="bold", size=12))
    grid_top = top + BLOCK_TITLE_HEIGHT
    row_height = max(MIN_ROW_HEIGHT, min(MAX_ROW_HEIGHT, TARGET_BLOCK_HEIGHT / len(names)))
    cell_width = (WIDTH - LABEL_WIDTH - RIGHT_MARGIN) / len(steps)
    label_every = math.ceil(LABEL_SPACING / row_height)
    body.append('<g shape-rendering="crispEdges">')  # no hairline seams between cells
    for row_index, row in enumerate(matrix):
        y = grid_top + row_index * row_height
        for column, value in enumerate(row):
            x = LABEL_WIDTH + column * cell_width
            colour = _colour(value, low, high, log_scale)
            body.append(rect(x, y, cell_width, row_height, colour))
    body.append("</g>")
    for row_index, name in enumerate(names):
        y = grid_top + row_index * row_height
        if row_index % label_every == 0:
            label = text(LABEL_WIDTH - 6, y + row_height / 2 + 4, _shorten(name), anchor="end")
            body.append(f"<g>{tooltip(name)}{label}</g>")
    grid_bottom = grid_top + len(names) * row_height
    step_every = math.ceil(48 / cell_width)
    for column, step in enumerate(steps):
        if column % step_every == 0 and step is not None:
            x = LABEL_WIDTH + (column + 0.5) * cell_width
            body.append(text(x, grid_bottom + 14, format_step(step), anchor="middle"))
    legend_top = grid_bottom + STEP_LABEL_HEIGHT
    _legend_svg(body, legend_top, low, high, log_scale)
    missing = sum(1 for row in matrix for v in row if v is None)
    nonfinite = sum(1 for row in matrix for v in row if v is not None and not math.isfinite(v))
    if missing or nonfinite:
        notes.append(
            f"{title} per layer: {nonfinite} non-finite cell(s) in black, "
            f"{missing} not measured in grey."
        )
    return legend_top + LEGEND_HEIGHT + BLOCK_GAP


def _legend_svg(body: list[str], top: float, low: float, high: float, log_scale: bool) -> None:
    cell = 8.0
    left = LABEL_WIDTH
    body.append(text(left - 6, top + 9, "low", anchor="end"))
    for index in range(LEGEND_CELLS):
        fraction = index / (LEGEND_CELLS - 1)
        body.append(rect(left + index * cell, top, cell, 10, _ramp(fraction)))
    right = left + LEGEND_CELLS * cell
    body.append(text(right + 6, top + 9, "high"))
    ticks = _legend_ticks(low, high, log_scale)
    for value in ticks:
        fraction = _fraction(value, low, high, log_scale)
        x = left + fraction * (LEGEND_CELLS * cell)
        body.append(text(x, top + 24, format_number(value), anchor="middle"))
    key = [(NONFINITE, "NaN/Inf"), (NOT_MEASURED, "not measured")]
    x = right + 60
    for colour, label in key:
        body.append(rect(x, top, 10, 10, colour, 'stroke="#999999" stroke-width="0.5"'))
        body.append(text(x + 14, top + 9, label))
        x += 14 + len(label) * CHAR_WIDTH + 18


def _legend_ticks(low: float, high: float, log_scale: bool) -> list[float]:
    if high <= low:
        return [low]
    if log_scale:
        exponents = range(math.ceil(math.log10(low)), math.floor(math.log10(high)) + 1)
        return [10.0**e for e in exponents] or [low, high]
    return nice_ticks(low, high, target=3)


def _colour(value: float | None, low: float, high: float, log_scale: bool) -> str:
    if value is None:
        return NOT_MEASURED
    if not math.isfinite(value):
        return NONFINITE
    return _ramp(_fraction(value, low, high, log_scale))


def _fraction(value: float, low: float, high: float, log_scale: bool) -> float:
    if high <= low:
        return 0.5
    if log_scale:
        position = (math.log10(value) - math.log10(low)) / (math.log10(high) - math.log10(low))
    else:
        position = (value - low) / (high - low)
    return min(1.0, max(0.0, position))


def _ramp(fraction: float) -> str:
    """Linear interpolation between the RAMP stops; 0 is the palest, 1 the darkest."""
    scaled = fraction * (len(RAMP) - 1)
    index = min(int(scaled), len(RAMP) - 2)
    weight = scaled - index
    channels = [
        round(start + (end - start) * weight)
        for start, end in zip(RAMP[index], RAMP[index + 1], strict=True)
    ]
    return "#{:02x}{:02x}{:02x}".format(*channels)


def _drawn_columns(count: int) -> list[int]:
    """Every column up to HEATMAP_MAX_STEPS, else that many evenly spaced, first and last kept."""
    if count <= HEATMAP_MAX_STEPS:
        return list(range(count))
    return sorted(
        {round(i * (count - 1) / (HEATMAP_MAX_STEPS - 1)) for i in range(HEATMAP_MAX_STEPS)}
    )


def _columns(matrix: list[list[float | None]], columns: list[int]) -> list[list[float | None]]:
    return [[row[i] for i in columns] for row in matrix]


def _matrix(
    raw: Sequence[Sequence[float | None]], rows: int, columns: int
) -> list[list[float | None]]:
    """names × steps, padded with None where a producer wrote a ragged or short matrix."""
    matrix = []
    for row in raw[:rows]:
        values = [parse_number(value) for value in row[:columns]]
        matrix.append(values + [None] * (columns - len(values)))
    matrix += [[None] * columns for _ in range(rows - len(matrix))]
    return matrix


def _shorten(name: str) -> str:
    """Keep the end of a long layer name: "…layers.11.mlp.down_proj" says more than the start."""
    limit = int((LABEL_WIDTH - 12) / CHAR_WIDTH)
    return name if len(name) <= limit else "…" + name[-(limit - 1) :]
