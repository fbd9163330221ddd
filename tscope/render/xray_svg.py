"""The token audit's two pictures, inline SVG: the weight of every target token (one strip per
sequence) and the leak matrix (which sequence's loss reaches which sequence's tokens)."""

from __future__ import annotations

import math
from collections.abc import Sequence

from tscope.render.svg import rect, svg_document, text, tooltip

CELL = 14  # px per target token / per matrix cell
LABEL_WIDTH = 96
# Weights are coloured by log2(weight / 1.0), clamped at ±WEIGHT_LOG2_RANGE: white = a token
# mean's weight, red = heavier, blue = lighter; ×4 or more is full colour.
WEIGHT_LOG2_RANGE = 2.0
# Leaks are coloured by log10 from the detection threshold (white) to 1 (the sequence's own).
LEAK_LOG10_FLOOR = -6.0


def _mix(share: float, colour: tuple[int, int, int]) -> str:
    share = max(0.0, min(1.0, share))
    r, g, b = (round(255 + (c - 255) * share) for c in colour)
    return f"#{r:02x}{g:02x}{b:02x}"


def weight_colour(weight: float | None) -> str:
    if weight is None or not math.isfinite(weight) or weight <= 0:
        return "#999999"
    level = math.log2(weight) / WEIGHT_LOG2_RANGE
    return _mix(level, (200, 40, 40)) if level > 0 else _mix(-level, (40, 90, 200))


def leak_colour(value: float | None) -> str:
    if value is None or not math.isfinite(value) or value <= 0:
        return "#ffffff"
    level = (math.log10(value) - LEAK_LOG10_FLOOR) / -LEAK_LOG10_FLOOR
    return _mix(level, (170, 20, 20))


def weight_strips(rows: Sequence[tuple[str, Sequence[tuple[float | None, str]]]]) -> str:
    """rows: (label, [(weight, hover text) per target]) per sequence."""
    widest = max((len(cells) for _, cells in rows), default=0)
    width = LABEL_WIDTH + widest * CELL + 8
    height = len(rows) * (CELL + 4) + 8
    body = []
    for index, (label, cells) in enumerate(rows):
        y = 4 + index * (CELL + 4)
        body.append(text(4, y + CELL - 3, label))
        for column, (weight, hover) in enumerate(cells):
            x = LABEL_WIDTH + column * CELL
            cell = rect(x, y, CELL - 1, CELL, weight_colour(weight), 'stroke="#dddddd"')
            body.append(f"<g>{cell}{tooltip(hover)}</g>")
    return svg_document(width, height, "Gradient weight per target token", body)


def leak_matrix(labels: Sequence[str], matrix: Sequence[Sequence[float | None]]) -> str:
    """Row = the sequence whose loss is back-propagated, column = the sequence receiving it."""
    size = len(labels)
    width = LABEL_WIDTH + size * CELL + 8
    height = 18 + size * CELL + 8
    body = [text(LABEL_WIDTH, 12, "receives →", size=10)]
    for row in range(size):
        y = 18 + row * CELL
        body.append(text(4, y + CELL - 3, f"{labels[row]} loss", size=10))
        for column in range(size):
            x = LABEL_WIDTH + column * CELL
            value = matrix[row][column] if column < len(matrix[row]) else None
            if row == column:
                cell = rect(x, y, CELL - 1, CELL - 1, "#cccccc")
                hover = f"{labels[row]}: its own tokens"
            else:
                cell = rect(x, y, CELL - 1, CELL - 1, leak_colour(value), 'stroke="#dddddd"')
                hover = f"{labels[row]} → {labels[column]}: {value if value is not None else '?'}"
            body.append(f"<g>{cell}{tooltip(hover)}</g>")
    return svg_document(width, height, "Gradient leaking between sequences", body)
