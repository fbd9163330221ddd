"""The replay section's step charts: the replayed loss against the logged one, and the what-ifs.

    replay_chart(case.replay)   # loss (replayed line, logged dots) and gradient norm, `around` marked
    whatif_chart(case.replay)   # each what-if's loss over the window on top of the baseline replay

Both take the typed section (tscope.model.replay_section.ReplaySection: numbers already read,
NaN/Inf kept) and return None when it holds nothing to draw. The section's per-step rows are the
replayed window at full resolution (tens of steps), so nothing is bucketed as the log charts are
(tscope.chart_data): `ReplaySteps.of` only turns the rows into columns.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from tscope.model.replay_section import ReplayFidelity, ReplaySection, WhatIf
from tscope.render.charts import LINE_COLORS, NONFINITE_COLOR, PLOT_LEFT, PLOT_RIGHT, WIDTH, Chart
from tscope.render.formatting import format_number, format_step
from tscope.render.replay_names import what_if_label
from tscope.render.replay_plot import (
    MARK_COLOR,
    Box,
    dots,
    frame,
    grid,
    horizontal,
    legend_entry,
    nonfinite_marks,
    polyline,
    step_mark,
    step_range,
    value_scale,
    window_band,
    x_labels,
)
from tscope.render.series import is_finite
from tscope.render.svg import CHAR_WIDTH, svg_document, text, triangle

LABEL_ROW = 18  # "around 145" above the panels
TITLE_ROW = 26  # panel title and legend
LOSS_HEIGHT = 150
GRAD_HEIGHT = 90
WHATIF_HEIGHT = 170
AXIS_HEIGHT = 42
LEGEND_LINE = 18
REPLAYED_COLOR, LOGGED_COLOR = LINE_COLORS  # dark blue line, orange dots
SKIPPED_COLOR = "#555555"
SPIKE_LINE_COLOR = "#d62728"
# What-ifs over the blue baseline: Dark2, distinct for colour-blind readers, each also dashed.
WHATIF_COLORS = ("#d95f02", "#1b9e77", "#7570b3", "#e7298a", "#66a61e", "#a6761d")
WHATIF_DASHES = ("6 3", "2 2", "8 3 2 3", "4 4", "1 3", "10 4")


@dataclass(frozen=True)
class ReplaySteps:
    """`replay.per_step` as columns: NaN/Inf kept, steps without a number dropped."""

    steps: tuple[float, ...]
    loss: tuple[float | None, ...]
    logged: tuple[float | None, ...]
    grad_norm: tuple[float | None, ...]
    skipped: tuple[float, ...]  # steps whose update a what-if skipped

    @classmethod
    def of(cls, section: ReplaySection) -> ReplaySteps:
        rows = sorted(
            (row for row in section.per_step if row.step is not None and is_finite(row.step)),
            key=lambda row: row.step or 0.0,
        )
        steps = tuple(row.step or 0.0 for row in rows)
        return cls(
            steps=steps,
            loss=tuple(row.loss for row in rows),
            logged=tuple(row.logged_loss for row in rows),
            grad_norm=tuple(row.grad_norm for row in rows),
            skipped=tuple(s for s, row in zip(steps, rows, strict=True) if row.update_skipped),
        )


def window_steps(section: ReplaySection) -> tuple[float, float] | None:
    """The steps asked for: around + window offsets."""
    window = section.window
    if section.around is None or len(window) != 2 or window[0] is None or window[1] is None:
        return None
    return section.around + window[0], section.around + window[1]


def replay_chart(section: ReplaySection | None) -> Chart | None:
    """Replayed loss (line) over logged loss (dots), gradient norm below, `around` marked."""
    if section is None:
        return None
    data = ReplaySteps.of(section)
    if not data.steps:
        return None
    boxes = _replay_boxes(data)
    window = window_steps(section)
    around = section.around
    body: list[str] = []
    notes: list[str] = []
    for box in boxes:
        if window is not None:
            body.append(window_band(box, *window))
        body.extend(grid(box))
    body.extend(_loss_panel(boxes[0], data, section.fidelity, notes))
    if len(boxes) > 1:
        body.extend(polyline(boxes[1], data.steps, data.grad_norm, REPLAYED_COLOR))
        body.extend(nonfinite_marks(boxes[1], data.steps, data.grad_norm))
        body.extend(_title(boxes[1], "Gradient norm (replayed, before clipping)", []))
    for box, name in zip(boxes, ("Loss", "Gradient norm"), strict=False):
        body.append(frame(box))
        if around is not None and box.holds(around):
            body.append(step_mark(box, around))
        if box.scale.kind == "log":
            notes.append(f"{name}: log scale.")
    if around is not None and boxes[0].holds(around):
        body.append(_top_label(boxes[0].x(around), f"around {format_step(around)}"))
    if any(v is not None and not math.isfinite(v) for v in (*data.loss, *data.grad_norm)):
        notes.append("▼ at the top edge: steps whose replayed value is NaN or Inf.")
    body.extend(x_labels(boxes[-1], "optimizer step"))
    height = boxes[-1].bottom + AXIS_HEIGHT
    title = "Replayed vs logged loss, and the replayed gradient norm, by optimizer step"
    return Chart(svg_document(WIDTH, height, title, body), tuple(notes))


def _replay_boxes(data: ReplaySteps) -> list[Box]:
    """The loss panel, and the gradient-norm panel under it when the replay computed one."""
    x_low, x_high = step_range(data.steps)
    losses = [v for v in (*data.loss, *data.logged) if v is not None and math.isfinite(v)]
    top: float = LABEL_ROW + TITLE_ROW
    boxes = [Box(PLOT_LEFT, PLOT_RIGHT, top, LOSS_HEIGHT, x_low, x_high, value_scale(losses))]
    if any(v is not None for v in data.grad_norm):
        norms = [v for v in data.grad_norm if v is not None and math.isfinite(v)]
        top = boxes[0].bottom + TITLE_ROW
        scale = value_scale(norms)
        boxes.append(Box(PLOT_LEFT, PLOT_RIGHT, top, GRAD_HEIGHT, x_low, x_high, scale))
    return boxes


def _loss_panel(
    box: Box, data: ReplaySteps, fidelity: ReplayFidelity, notes: list[str]
) -> list[str]:
    """The replayed line, the logged dots (red where not reproduced), skipped updates, legend."""
    mismatched = set(fidelity.mismatched_steps)
    pairs = list(zip(data.steps, data.logged, strict=True))
    matched = [None if step in mismatched else value for step, value in pairs]
    missed = [value if step in mismatched else None for step, value in pairs]
    parts = polyline(box, data.steps, data.loss, REPLAYED_COLOR)
    parts += dots(box, data.steps, matched, LOGGED_COLOR, 3.0)
    parts += dots(box, data.steps, missed, NONFINITE_COLOR, 3.5)
    parts += nonfinite_marks(box, data.steps, data.loss)
    parts += [triangle(box.x(step), box.bottom - 8, SKIPPED_COLOR, False) for step in data.skipped]
    legend = [("replayed", REPLAYED_COLOR, "line"), ("logged", LOGGED_COLOR, "dot")]
    if any(value is not None for value in missed):
        legend.append(("logged, not reproduced", NONFINITE_COLOR, "dot"))
        notes.append(
            f"Red dots: logged losses the replay does not reproduce ({len(mismatched)} step(s))."
        )
    logging_window = fidelity.logging_window
    if logging_window is not None and logging_window > 1:
        notes.append(
            f"Logged losses average up to {format_step(logging_window)} steps (the run's logging "
            "interval); each dot sits at the last step it covers, and the replay was compared "
            "with the same average."
        )
    if data.skipped:
        legend.append(("▲ update skipped", SKIPPED_COLOR, "none"))
        steps_text = ", ".join(format_step(step) for step in data.skipped)
        notes.append(f"▲ at the bottom: steps whose update was skipped ({steps_text}).")
    return parts + _title(box, "Loss", legend)


def whatif_chart(section: ReplaySection | None) -> Chart | None:
    """Each what-if's loss over the window, on the baseline replay's, with the spike line."""
    if section is None:
        return None
    experiments: list[tuple[str, list[tuple[float, float | None]]]] = []
    for item in section.interventions:
        kept = _what_if_losses(item)
        if kept:
            experiments.append((what_if_label(item.name, item.params), kept))
    if not experiments:
        return None
    all_steps = [step for _, points in experiments for step, _ in points]
    x_low, x_high = step_range(all_steps)
    data = ReplaySteps.of(section)
    base = [(s, v) for s, v in zip(data.steps, data.loss, strict=True) if x_low <= s <= x_high]
    lines = sorted(
        {
            item.spike_line
            for item in section.interventions
            if item.spike_line is not None and math.isfinite(item.spike_line)
        }
    )
    every = [v for _, points in experiments for _, v in points] + [v for _, v in base] + lines
    finite = [v for v in every if v is not None and math.isfinite(v)]
    legend: list[tuple[str, str, str, str]] = [("baseline replay", REPLAYED_COLOR, "line", "")]
    for index, (label, _) in enumerate(experiments):
        color, dash = _whatif_style(index)
        legend.append((f"what-if {label}", color, "line", dash))
    legend_parts, legend_rows = _legend_rows(legend, LEGEND_LINE - 4)
    top = legend_rows * LEGEND_LINE + LABEL_ROW
    box = Box(PLOT_LEFT, PLOT_RIGHT, top, WHATIF_HEIGHT, x_low, x_high, value_scale(finite))
    body = [*legend_parts, *grid(box)]
    for value in lines:
        body.append(horizontal(box, value, SPIKE_LINE_COLOR))
        label = f"spike line {format_number(value)}"
        body.append(text(box.left + 4, box.y(value) - 4, label, color=SPIKE_LINE_COLOR, halo=True))
    around = section.around
    if around is not None and box.holds(around):
        body.append(step_mark(box, around))
        body.append(_top_label(box.x(around), f"around {format_step(around)}", box.top - 4))
    body.extend(polyline(box, [s for s, _ in base], [v for _, v in base], REPLAYED_COLOR, 2.2))
    for index, (_, points) in enumerate(experiments):
        color, dash = _whatif_style(index)
        steps, values = [s for s, _ in points], [v for _, v in points]
        body.extend(polyline(box, steps, values, color, 1.8, dash))
        body.extend(nonfinite_marks(box, steps, values))
    body.append(frame(box))
    body.extend(x_labels(box, "optimizer step"))
    notes = ["Loss: log scale."] if box.scale.kind == "log" else []
    title = "What-if replays: loss over the window against the baseline replay"
    return Chart(svg_document(WIDTH, box.bottom + AXIS_HEIGHT, title, body), tuple(notes))


def _what_if_losses(item: WhatIf) -> list[tuple[float, float | None]]:
    """An intervention's (step, loss) pairs, NaN/Inf kept, points without a step dropped."""
    return [(step, loss) for step, loss in item.losses if step is not None and math.isfinite(step)]


def _whatif_style(index: int) -> tuple[str, str]:
    return WHATIF_COLORS[index % len(WHATIF_COLORS)], WHATIF_DASHES[index % len(WHATIF_DASHES)]


def _title(box: Box, title: str, legend: Sequence[tuple[str, str, str]]) -> list[str]:
    baseline = box.top - 8
    parts = [text(box.left, baseline, title, weight="bold", size=12)]
    x = box.left + len(title) * CHAR_WIDTH * 1.15 + 14
    for label, color, kind in legend:
        if kind == "none":
            parts.append(text(x, baseline, label, color=color))
            x += len(label) * CHAR_WIDTH + 16
            continue
        entry, x = legend_entry(x, baseline, color, label, kind)
        parts.extend(entry)
    if box.scale.kind != "linear":
        label = "log scale" if box.scale.kind == "log" else "axis clipped"
        parts.append(text(box.right, baseline, label, anchor="end", color="#555555"))
    return parts


def _legend_rows(
    entries: Sequence[tuple[str, str, str, str]], first_baseline: float
) -> tuple[list[str], int]:
    """Legend entries left to right, wrapping onto a new row before the plot's right edge."""
    parts: list[str] = []
    x, baseline, rows = float(PLOT_LEFT), first_baseline, 1
    for label, color, kind, dash in entries:
        width = 22 + len(label) * CHAR_WIDTH + 16
        if x > PLOT_LEFT and x + width > PLOT_RIGHT:
            x, baseline, rows = float(PLOT_LEFT), baseline + LEGEND_LINE, rows + 1
        entry, x = legend_entry(x, baseline, color, label, kind, dash)
        parts.extend(entry)
    return parts, rows


def _top_label(x: float, label: str, baseline: float = LABEL_ROW - 4) -> str:
    return text(x, baseline, label, anchor="middle", color=MARK_COLOR, weight="bold")
