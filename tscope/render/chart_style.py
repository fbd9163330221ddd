"""What every chart shares: the drawing's width and plot margins, colours, and the Chart result.

Kept apart from the drawing code so the case, replay and cluster charts can share one look
without importing each other.
"""

from __future__ import annotations

from dataclasses import dataclass

WIDTH = 960
PLOT_LEFT = 84  # room for y tick labels such as "1.23e-4"
PLOT_RIGHT = WIDTH - 20
GRID = "#e3e3e3"
FRAME = "#9a9a9a"
# Dark blue for the main series, orange for the overlay (eval loss): distinct for colour-blind
# readers and still two different greys when printed black and white.
LINE_COLORS = ("#1f4e99", "#c05600")
SPIKE_FILL = "#d62728"
FINDING_COLOR = "#6a1b9a"
NONFINITE_COLOR = "#c62828"
MUTED_INK = "#555555"


@dataclass(frozen=True)
class Chart:
    svg: str
    notes: tuple[str, ...]  # what a reader must know to read it right: scales, clipping, NaN
