"""The cluster report's SVG charts: each cluster's runs aligned on their explosion, and all runs.

    aligned_chart(report, 0)   # cluster C1: loss ÷ own baseline against steps from the explosion
    overview_chart(report, 8)  # raw loss of every charted run, aligned spikes shaded

Drawn from the payload's `chart.runs` (bucketed loss of at most 60 runs) and each cluster's
`loss_band`, with the same primitives, scales and fixed-precision coordinates as the case charts,
so the same payload always gives the same bytes. Run names and cluster ids are XML-escaped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from tscope.model.cluster_file import AlignedSpikeRow, ClusterFile, LossBandRow
from tscope.render.charts import PLOT_LEFT, PLOT_RIGHT, WIDTH, Chart
from tscope.render.cluster_plot import (
    AXIS_HEIGHT,
    INK_SOFT,
    PLOT_HEIGHT,
    TITLE_ROW,
    ChartRun,
    Plot,
    chart_runs,
    frame,
    grid,
    loss_scale,
    nonfinite_marks,
    polyline,
    run_line,
    scale_label,
    span_of,
    widened,
    x_axis,
)
from tscope.render.formatting import format_number, format_step, optional_float
from tscope.render.series import finite_runs, is_finite
from tscope.render.svg import CHAR_WIDTH, line, rect, svg_document, text, xml_text

LABEL_ROW = 15  # baseline of the aligned-spike ids above the overview's plot
STABLE_COLOR = "#9e9e9e"
# Unstable runs in warm colours, one per cluster (orange, dark red, brown, magenta, ochre): they
# stand out against the grey stable runs and stay distinct from each other.
CLUSTER_COLORS = ("#d95f02", "#b2182b", "#8c510a", "#c51b7d", "#bf8f00")
BAND_MEDIAN_COLOR = "#1a1a1a"
SPIKE_COLOR = "#5e3c99"  # aligned spikes: purple, a colour no run line uses
EXPLOSION_LABEL = "explosion"
LEGEND_RIGHT = PLOT_RIGHT - 70  # the legend stops short of the "log scale" label


@dataclass(frozen=True)
class Band:
    """A cluster's loss_band: per step offset the median and quartiles of loss ÷ baseline."""

    offsets: list[float]
    median: list[float | None]
    lower: list[float | None]  # 25th percentile
    upper: list[float | None]  # 75th percentile


def cluster_color(index: int) -> str:
    return CLUSTER_COLORS[index % len(CLUSTER_COLORS)]


def aligned_spike_ids(report: ClusterFile) -> list[tuple[str, AlignedSpikeRow]]:
    """A1, A2, … in step order: the ids the overview chart and the tables share."""
    ordered = sorted(report.aligned_spikes, key=lambda spike: _step_or_inf(spike.first_step))
    return [(f"A{index}", spike) for index, spike in enumerate(ordered, start=1)]


def aligned_chart(report: ClusterFile, index: int) -> Chart | None:
    """Cluster `index`: members' loss ÷ baseline against steps from their explosion, the IQR band
    shaded with its median drawn over it. None when there is neither a band nor a member curve."""
    cluster = report.clusters[index]
    cluster_id = cluster.id
    color = cluster_color(index)
    band = _band(cluster.loss_band)
    members = [
        _aligned(run)
        for run in chart_runs(report)
        if run.cluster == cluster_id and run.explosion_step is not None and run.baseline_loss
    ]
    offsets = [step for run in members for step in run.steps]
    x_range = (band.offsets[0], band.offsets[-1]) if band else span_of(offsets)
    if x_range is None:
        return None
    x_low, x_high = widened(*x_range)
    logged_nonfinite = sum(
        any(v is not None and not is_finite(v) for v in run.values) for run in members
    )
    members = [_clipped(run, x_low, x_high) for run in members]
    finite = [v for run in members for v in run.values if is_finite(v)]
    if band:
        finite += [v for v in (*band.median, *band.lower, *band.upper) if is_finite(v)]
    plot = Plot(TITLE_ROW, x_low, x_high, loss_scale([v for v in finite if v is not None]))
    notes: list[str] = []
    body = grid(plot)
    if band:
        body.extend(_band_svg(plot, band, color))
    for run in members:
        body.extend(run_line(plot, run, color, width=1.2, opacity=0.55))
    if band:
        median = polyline(plot, band.offsets, band.median, BAND_MEDIAN_COLOR, 2.0, 1.0)
        body.extend(f'<g class="band-median">{part}</g>' for part in median)
    if x_low <= 0 <= x_high:
        body.append(line(plot.x(0), plot.top, plot.x(0), plot.bottom, INK_SOFT, dash="4 3"))
        body.append(text(plot.x(0) + 4, plot.top + 12, EXPLOSION_LABEL, color=INK_SOFT, halo=True))
    body.extend(nonfinite_marks(plot, members, notes, logged_nonfinite))
    body.append(frame(plot))
    title = f"{cluster_id}: loss ÷ each run's early baseline, aligned on its explosion step"
    body.append(text(PLOT_LEFT, TITLE_ROW - 8, title, weight="bold", size=12))
    body.extend(scale_label(plot))
    body.extend(x_axis(plot, "steps from the explosion (negative: before it)"))
    if plot.scale.kind == "log":
        notes.append("Log scale: the loss grew by orders of magnitude after the explosion.")
    if band:
        notes.append(
            "Shaded: the middle half of the cluster's runs at each offset (25th–75th "
            "percentile); black line: their median; thin lines: each run."
        )
    height = plot.bottom + AXIS_HEIGHT
    return Chart(svg_document(WIDTH, height, title, body), tuple(notes))


def overview_chart(report: ClusterFile, total_runs: int) -> Chart | None:
    """Raw loss of every charted run by step: stable grey, unstable in their cluster's colour,
    explosions ringed, aligned spikes as thin labelled bands."""
    runs = chart_runs(report)
    x_range = span_of([step for run in runs for step in run.steps])
    if x_range is None:
        return None
    x_low, x_high = widened(*x_range)
    spikes = aligned_spike_ids(report)
    top = TITLE_ROW + (LABEL_ROW + 8 if spikes else 0)
    finite = [v for run in runs for v in run.values if v is not None and is_finite(v)]
    plot = Plot(top, x_low, x_high, loss_scale(finite))
    colors = _colors_by_cluster(report)
    notes: list[str] = []
    body = grid(plot)
    body.extend(_spike_bands(plot, spikes))
    stable = [run for run in runs if run.status != "unstable"]
    unstable = [run for run in runs if run.status == "unstable"]
    for run in stable:
        body.extend(run_line(plot, run, STABLE_COLOR, width=1.0, opacity=0.8))
    for run in unstable:
        color = colors.get(run.cluster or "", CLUSTER_COLORS[0])
        body.extend(run_line(plot, run, color, width=1.4, opacity=0.9))
    body.extend(_explosion_marks(plot, unstable, colors))
    body.extend(nonfinite_marks(plot, runs, notes))
    body.append(frame(plot))
    title = "Training loss of every run by optimizer step"
    body.append(text(PLOT_LEFT, TITLE_ROW - 8, "Training loss", weight="bold", size=12))
    body.extend(_overview_legend(len(stable), unstable, colors, bool(spikes)))
    body.extend(scale_label(plot))
    body.extend(x_axis(plot, "optimizer step"))
    if plot.scale.kind == "log":
        notes.append("Log scale: the unstable runs' loss is orders of magnitude above the rest.")
    elif plot.scale.kind == "clipped":
        notes.append(f"Axis clipped at {format_number(plot.scale.high)}: higher points sit on top.")
    if total_runs > len(runs):
        notes.append(f"{len(runs)} of {total_runs} runs are drawn (unstable runs first).")
    return Chart(svg_document(WIDTH, plot.bottom + AXIS_HEIGHT, title, body), tuple(notes))


def _band_svg(
    plot: Plot,
    band: Band,
    color: str,
) -> list[str]:
    offsets, lower, upper = band.offsets, band.lower, band.upper
    parts = []
    for indices in finite_runs(list(zip(lower, upper, strict=True))):
        top_edge = [f"{plot.x(offsets[i]):.1f},{plot.y(upper[i] or 0.0):.1f}" for i in indices]
        bottom_edge = [f"{plot.x(offsets[i]):.1f},{plot.y(lower[i] or 0.0):.1f}" for i in indices]
        points = " ".join(top_edge + bottom_edge[::-1])
        parts.append(
            f'<polygon class="band" points="{points}" fill="{color}" fill-opacity="0.25" '
            'stroke="none"/>'
        )
    return parts


def _explosion_marks(plot: Plot, runs: Sequence[ChartRun], colors: dict[str, str]) -> list[str]:
    """A ring on each unstable run's curve at its first charted point from the explosion on."""
    parts = []
    for run in runs:
        if run.explosion_step is None:
            continue
        index = next((i for i, s in enumerate(run.steps) if s >= run.explosion_step), None)
        value = None if index is None else run.values[index]
        if index is None or value is None or not is_finite(value):
            continue  # a non-finite explosion is already marked ▼
        color = colors.get(run.cluster or "", CLUSTER_COLORS[0])
        parts.append(
            f'<circle class="explosion" cx="{plot.x(run.steps[index]):.1f}" '
            f'cy="{plot.y(value):.1f}" r="4" fill="#ffffff" stroke="{color}" stroke-width="2">'
            f"<title>{xml_text(run.name)}: explosion at step {format_step(run.explosion_step)}"
            "</title></circle>"
        )
    return parts


def _spike_bands(plot: Plot, spikes: Sequence[tuple[str, AlignedSpikeRow]]) -> list[str]:
    """Each aligned spike as a thin band through the plot, its id above; neighbours whose ids
    would overlap share one label, "A2–A4", centred on their bands."""
    parts = []
    groups: list[list[tuple[float, str]]] = []  # per label: (band centre px, id), left to right
    for spike_id, spike in spikes:
        first = optional_float(spike.first_step)
        last = optional_float(spike.last_step)
        if first is None or not is_finite(first):
            continue
        last = first if last is None or not is_finite(last) else max(last, first)
        left, right = plot.x(max(first, plot.x_low)), plot.x(min(last, plot.x_high))
        if right - left < 3:  # a one-step coincidence still needs a visible band
            left, right = (left + right) / 2 - 1.5, (left + right) / 2 + 1.5
        parts.append(
            rect(left, plot.top, right - left, PLOT_HEIGHT, SPIKE_COLOR, 'fill-opacity="0.22"')
        )
        centre = (left + right) / 2
        if groups:
            previous_right = _label_extent(groups[-1])[1]
            if centre - len(spike_id) * CHAR_WIDTH / 2 < previous_right + CHAR_WIDTH:
                groups[-1].append((centre, spike_id))
                continue
        groups.append([(centre, spike_id)])
    for group in groups:
        left, right = _label_extent(group)
        parts.append(
            text(
                (left + right) / 2,
                TITLE_ROW + LABEL_ROW,
                _group_label(group),
                anchor="middle",
                color=SPIKE_COLOR,
                weight="bold",
            )
        )
    return [f'<g class="aligned-spikes">{"".join(parts)}</g>'] if parts else []


def _group_label(group: Sequence[tuple[float, str]]) -> str:
    return group[0][1] if len(group) == 1 else f"{group[0][1]}–{group[-1][1]}"


def _label_extent(group: Sequence[tuple[float, str]]) -> tuple[float, float]:
    """Pixel edges of a group's label: centred between its first and last band, kept in the plot."""
    width = len(_group_label(group)) * CHAR_WIDTH * 1.1  # bold glyphs run about 10 % wider
    centre = (group[0][0] + group[-1][0]) / 2
    centre = min(max(centre, PLOT_LEFT + width / 2), PLOT_RIGHT - width / 2)
    return centre - width / 2, centre + width / 2


def _overview_legend(
    stable_count: int, unstable: Sequence[ChartRun], colors: dict[str, str], spikes: bool
) -> list[str]:
    entries: list[tuple[str, str]] = []  # (colour, label)
    if stable_count:
        entries.append((STABLE_COLOR, f"stable ({stable_count})"))
    for cluster_id, color in colors.items():
        count = sum(run.cluster == cluster_id for run in unstable)
        if count:
            entries.append((color, f"{cluster_id} ({count})"))
    loose = sum(run.cluster not in colors for run in unstable)
    if loose:
        entries.append((CLUSTER_COLORS[0], f"unstable, no cluster ({loose})"))
    if unstable:
        entries.append(("", EXPLOSION_LABEL))
    if spikes:
        entries.append((SPIKE_COLOR, "aligned spike"))
    parts = []
    x: float = PLOT_LEFT + 110  # right of the "Training loss" title
    baseline = TITLE_ROW - 8
    for index, (color, label) in enumerate(entries):
        if x + 22 + len(label) * CHAR_WIDTH > LEGEND_RIGHT:  # many clusters: the rest is in tables
            parts.append(text(x, baseline, f"+{len(entries) - index} more", color=INK_SOFT))
            break
        if label == EXPLOSION_LABEL and not color:
            parts.append(
                f'<circle cx="{x + 9:.1f}" cy="{baseline - 4:.1f}" r="4" fill="#ffffff" '
                f'stroke="{INK_SOFT}" stroke-width="2"/>'
            )
        elif label == "aligned spike":
            parts.append(rect(x + 6, baseline - 10, 6, 12, color, 'fill-opacity="0.5"'))
        else:
            parts.append(
                f'<line x1="{x:.1f}" y1="{baseline - 4:.1f}" x2="{x + 18:.1f}" '
                f'y2="{baseline - 4:.1f}" stroke="{color}" stroke-width="2"/>'
            )
        parts.append(text(x + 22, baseline, label))
        x += 22 + len(label) * CHAR_WIDTH + 14
    return [f'<g class="legend">{"".join(parts)}</g>']


def _colors_by_cluster(report: ClusterFile) -> dict[str, str]:
    return {item.id: cluster_color(i) for i, item in enumerate(report.clusters)}


def _band(raw: LossBandRow | None) -> Band | None:
    """The cluster's loss_band with its lists of equal length, or None when there is none."""
    if raw is None:
        return None
    offsets = [optional_float(step) for step in raw.steps]
    columns = [[optional_float(v) for v in column] for column in (raw.median, raw.lower, raw.upper)]
    if not offsets or any(len(column) != len(offsets) for column in columns):
        return None
    keep = [i for i, offset in enumerate(offsets) if is_finite(offset)]
    if not keep:
        return None
    median, lower, upper = ([column[i] for i in keep] for column in columns)
    return Band([float(offsets[i] or 0.0) for i in keep], median, lower, upper)


def _aligned(run: ChartRun) -> ChartRun:
    """The run against steps from its explosion, its loss divided by its own baseline."""
    explosion, baseline = run.explosion_step or 0.0, run.baseline_loss or 1.0
    return replace(
        run,
        steps=tuple(step - explosion for step in run.steps),
        values=tuple(None if value is None else value / baseline for value in run.values),
    )


def _clipped(run: ChartRun, low: float, high: float) -> ChartRun:
    keep = [i for i, step in enumerate(run.steps) if low <= step <= high]
    return replace(
        run, steps=tuple(run.steps[i] for i in keep), values=tuple(run.values[i] for i in keep)
    )


def _step_or_inf(value: float | None) -> float:
    number = optional_float(value)
    return number if number is not None and is_finite(number) else float("inf")
