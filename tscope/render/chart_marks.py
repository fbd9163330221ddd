"""What the step charts mark on the shared step axis: incident bands, finding lines, the row of
ids above the panels, and the hover columns that name the step and values under the pointer.

The analyzers decide what matters (a finding's severity, the spike it belongs to); this module
only chooses how it is drawn: a band for a spike that a warning or critical finding is about,
none for an informational one, so a healthy run is not painted red.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from tscope.model.case import Case
from tscope.model.categories import ALERT_SEVERITIES
from tscope.render.chart_panels import LABEL_GAP, Panel, label_width
from tscope.render.chart_style import FINDING_COLOR, PLOT_LEFT, PLOT_RIGHT, SPIKE_FILL
from tscope.render.formatting import MAX_SHOWN_FINDINGS, format_number, format_step, parse_number
from tscope.render.svg import line, rect, tooltip, xml_text

# Marks closer than this many pixels are one label ("S4 F1 F4 +4"): seven ids between steps 150
# and 155 cannot each have their own.
MERGE_MARKS_PX = 30
MAX_IDS_PER_LABEL = 3
MAX_HOVER_COLUMNS = 480  # about one per 2 px of plot; more adds bytes, not readability
MIN_BAND_PX = 3.0  # a one-step spike still needs a visible band


@dataclass(frozen=True)
class Mark:
    x: float
    label: str  # "S4", "F1"
    color: str
    description: str  # the tooltip line: "F1 critical loss_divergence at step 157"


def alert_spike_ids(case: Case) -> set[str]:
    """Spikes a warning or critical finding is about: the ones worth a band."""
    return {
        finding.spike_id
        for finding in case.findings
        if finding.spike_id and finding.severity in ALERT_SEVERITIES
    }


def spike_bands(
    case: Case, x_of: Callable[[float], float], x_low: float, x_high: float
) -> list[tuple[float, float, str]]:
    """(left px, right px, spike id) of each alerting spike; an unrecovered one runs to the end."""
    alerting = alert_spike_ids(case)
    bands = []
    for spike in case.spikes:
        onset = parse_number(spike.onset_step)
        end = parse_number(spike.end_step)
        if onset is None or spike.id not in alerting:
            continue
        end = x_high if end is None else end
        if end < x_low or onset > x_high:
            continue
        left, right = x_of(max(onset, x_low)), x_of(min(max(end, onset), x_high))
        if right - left < MIN_BAND_PX:
            left, right = left - MIN_BAND_PX / 2, right + MIN_BAND_PX / 2
        bands.append((left, right, spike.id))
    return bands


def band_svg(
    bands: Sequence[tuple[float, float, str]], panel_tops: Sequence[float], panel_height: float
) -> list[str]:
    shade = 'class="spike" fill-opacity="0.13"'
    return [
        rect(left, panel_top, right - left, panel_height, SPIKE_FILL, shade)
        for left, right, _ in bands
        for panel_top in panel_tops
    ]


def finding_marks(
    case: Case, x_of: Callable[[float], float], x_low: float, x_high: float
) -> list[Mark]:
    marks = []
    for finding in case.findings[:MAX_SHOWN_FINDINGS]:  # the findings the report lists
        step = parse_number(finding.step)
        if step is None or not x_low <= step <= x_high or not finding.id:
            continue
        described = (
            f"{finding.id} {finding.severity} {finding.category} at step {format_step(step)}"
        )
        marks.append(Mark(x_of(step), finding.id, FINDING_COLOR, described))
    return marks


def spike_marks(
    case: Case,
    bands: Sequence[tuple[float, float, str]],
    x_of: Callable[[float], float],
) -> list[Mark]:
    shaded = {spike_id for _, _, spike_id in bands}
    marks = []
    for spike in case.spikes:
        onset = parse_number(spike.onset_step)
        if onset is None or spike.id not in shaded:
            continue
        end = format_step(spike.end_step) if spike.end_step is not None else "the end"
        described = f"{spike.id} {spike.metric} from step {format_step(onset)} to {end}"
        marks.append(Mark(x_of(onset), spike.id, SPIKE_FILL, described))
    return marks


def finding_lines(marks: Sequence[Mark], segments: Sequence[tuple[float, float]]) -> list[str]:
    """Each finding's dashed line through every panel (segments skip the title rows)."""
    xs = sorted({round(mark.x, 1) for mark in marks if mark.color == FINDING_COLOR})
    return [
        line(x, upper, x, lower, FINDING_COLOR, dash="4 3") for x in xs for upper, lower in segments
    ]


def mark_labels(marks: Sequence[Mark], baseline: float) -> list[str]:
    """The ids above the panels: nearby marks merged into one label, labels never overlapping.

    A merged label shows its first ids and "+N"; its tooltip lists every id it stands for.
    """
    groups: list[list[Mark]] = []
    for mark in sorted(marks, key=lambda m: (m.x, m.color != SPIKE_FILL, m.label)):
        if groups and mark.x - groups[-1][-1].x <= MERGE_MARKS_PX:
            groups[-1].append(mark)
        else:
            groups.append([mark])
    placed: list[tuple[float, float, list[Mark], list[Mark]]] = []
    for group in groups:
        shown = group[:MAX_IDS_PER_LABEL] if len(group) > MAX_IDS_PER_LABEL + 1 else group
        content = " ".join(mark.label for mark in shown)
        if len(shown) < len(group):
            content += f" +{len(group) - len(shown)}"
        width = label_width(content, bold=True)
        centre = sum(mark.x for mark in group) / len(group)
        left = min(max(centre - width / 2, PLOT_LEFT), PLOT_RIGHT - width)
        if placed:
            left = max(left, placed[-1][1] + LABEL_GAP)
        placed.append((left, left + width, group, shown))
    # Pushed past the right edge: walk back from the right, keeping every gap.
    limit: float = PLOT_RIGHT
    for index in range(len(placed) - 1, -1, -1):
        left, right, group, shown = placed[index]
        if right > limit:
            left, right = limit - (right - left), limit
        placed[index] = (left, right, group, shown)
        limit = left - LABEL_GAP
    parts = []
    for left, _, group, shown in placed:
        spans = [f'<tspan fill="{mark.color}">{xml_text(mark.label)}</tspan>' for mark in shown]
        more = len(group) - len(shown)
        if more:
            spans.append(f'<tspan fill="{FINDING_COLOR}">+{more}</tspan>')
        hint = tooltip("; ".join(mark.description for mark in group))
        parts.append(
            f'<text x="{left:.1f}" y="{baseline:.1f}" font-weight="bold" class="marks">'
            f"{hint}{' '.join(spans)}</text>"
        )
    return parts


def hover_columns(
    panels: Sequence[Panel],
    x_of: Callable[[float], float],
    top: float,
    bottom: float,
    units: dict[str, str],
) -> list[str]:
    """Invisible columns, one per charted step, whose tooltip reads that step's values: hover
    to read a number without JavaScript; printed, the page is unchanged."""
    values: dict[float, list[str]] = {}
    for panel in panels:
        for series in panel.series:
            unit = units.get(series.metric, "")
            for step, value in zip(series.steps, series.values, strict=True):
                shown = format_number(value) + (f" {unit}" if unit and value is not None else "")
                values.setdefault(step, []).append(f"{series.metric} {shown}")
    steps = sorted(values)
    if not steps:
        return []
    stride = max(1, -(-len(steps) // MAX_HOVER_COLUMNS))
    kept = steps[::stride]
    parts = []
    for index, step in enumerate(kept):
        left = (x_of(kept[index - 1]) + x_of(step)) / 2 if index else x_of(step) - 1
        right = (
            (x_of(step) + x_of(kept[index + 1])) / 2 if index + 1 < len(kept) else x_of(step) + 1
        )
        left, right = max(left, PLOT_LEFT), min(right, PLOT_RIGHT)
        label = f"step {format_step(step)}: " + ", ".join(values[step])
        parts.append(
            f'<rect x="{left:.1f}" y="{top:.1f}" width="{max(right - left, 0.5):.1f}" '
            f'height="{bottom - top:.1f}" fill="#000000" fill-opacity="0">{tooltip(label)}</rect>'
        )
    return [f'<g class="hover">{"".join(parts)}</g>']
