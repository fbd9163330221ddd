"""The case payload turned into what the HTML and Markdown templates print, in print order.

Every number is formatted here, every list sorted or grouped here, every missing section given its
empty default here; the templates only lay the strings out and escape them for their format. The
case is typed (`Case.from_dict` already gave an older file's missing optional fields their
defaults and refused a field of the wrong type), so nothing here guesses at the payload's shape.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from typing import Any

import jinja2

from tscope.model.case import (
    Alternative,
    Case,
    ChangePoint,
    CheckpointInfo,
    Finding,
    Spike,
    StoryEvent,
)
from tscope.model.case_parts import LayerHeatmap
from tscope.model.categories import SEVERITIES
from tscope.render.card_view import card_view
from tscope.render.charts import main_chart_metrics
from tscope.render.formatting import (
    MAX_CONFIG_ROWS,
    MAX_SHOWN_FINDINGS,
    MISSING,
    bounded_line,
    flatten,
    format_number,
    format_step,
    one_line,
    parse_number,
    shown_in_template,
)
from tscope.render.heatmap import MEASURES
from tscope.render.replay_view import replay_view
from tscope.render.template_cache import attach_user_cache
from tscope.render.xray_view import xray_view

TEMPLATE_PACKAGE = "tscope.templates"  # the top-level templates/ folder, installed inside tscope
STATUS_LABELS = {
    "incident": "Incident",
    "healthy": "Healthy",
    "insufficient_data": "Insufficient data",
    "no_data": "No data",
}
NO_NEXT_STEPS = {
    "healthy": "Nothing to do: no finding calls for action.",
    "insufficient_data": "Log more of the run (the loss at every step) and analyze again.",
    "no_data": "Point tscope at the run's logs or checkpoints: nothing analyzable was found.",
}
TOP_LAYERS = 10  # rows of the "top layers" table per per-layer measure
# What the per-layer numbers measure: both are per optimizer step (tscope.ingest.checkpoints.stats.weight_deltas),
# which is why a weight norm that grew ×1.93 between checkpoints 60 steps apart reads 0.011.
MEASURE_UNITS = {
    "update_ratio": "‖ΔW‖ / ‖W‖ per optimizer step",
    "norm_growth": "relative change of ‖W‖ per optimizer step",
}


@functools.cache
def template_environment(autoescape: bool) -> jinja2.Environment:
    """Templates from the installed package; StrictUndefined so a typo fails instead of vanishing.

    One environment per process and autoescape setting: jinja keeps its compiled templates, so
    a sweep (tscope cluster renders a case per run) compiles each template once per worker, not
    once per run (compiling case.html.j2 and case.md.j2 took longer than rendering them), and
    the compiled code is kept between processes in the user's cache (render/template_cache.py).
    The callers add the same filters every time, so sharing it changes no output."""
    return attach_user_cache(
        jinja2.Environment(
            loader=jinja2.PackageLoader(TEMPLATE_PACKAGE, package_path="."),
            autoescape=autoescape,
            finalize=shown_in_template,
            undefined=jinja2.StrictUndefined,
            trim_blocks=True,
            lstrip_blocks=True,
            keep_trailing_newline=True,
        )
    )


def build_view(case: Case) -> dict[str, Any]:
    """Everything a template prints, as plain strings and lists (no numbers left to format)."""
    summary = case.summary
    spikes = [_spike_view(spike) for spike in case.spikes]
    status = summary.status or "no_data"
    return {
        "run": _run_view(case),
        "status": status if status in STATUS_LABELS else "unknown",
        "status_label": STATUS_LABELS.get(status, status),
        "verdict": one_line(summary.verdict or "No verdict was recorded."),
        "card": card_view(summary),
        "next_steps": [one_line(step) for step in summary.next_steps],
        "no_next_steps": NO_NEXT_STEPS.get(status, "No next step was recorded."),
        "headline": summary.headline_finding or "",
        "findings": [_finding_view(item) for item in case.findings[:MAX_SHOWN_FINDINGS]],
        "findings_not_shown": max(len(case.findings) - MAX_SHOWN_FINDINGS, 0),
        "severity_counts": _severity_counts(case.findings),
        "alternatives": [_alternative_view(item) for item in case.alternatives],
        "spikes": spikes,
        "story_groups": _story_groups(case.story, spikes),
        "change_points": [_change_point_view(item) for item in case.change_points],
        "events": [
            {
                "step": format_step(item.step),
                "kind": item.kind,
                "detail": one_line(item.detail),
                "source": item.source,
            }
            for item in sorted(case.events, key=lambda event: _step_key(event.step, event.kind))
        ],
        "limits": [one_line(item) for item in case.limits],
        "caveats": [
            {"kind": item.kind, "message": one_line(item.message), "source": item.source}
            for item in case.caveats
        ],
        "partial": [
            {"path": item.path, "problem": one_line(item.problem)} for item in case.partial
        ],
        "checkpoints": [
            _checkpoint_view(item)
            for item in sorted(case.checkpoints, key=lambda checkpoint: _step_key(checkpoint.step))
        ],
        "config": flatten(case.run.config, MAX_CONFIG_ROWS),
        "other_metrics": _other_metrics(case),
        "layer_tables": _layer_tables(case.layers),
        "replay": replay_view(case.replay),
        "xray": xray_view(case.xray),
        "tool": f"tscope {case.tool_version}, case schema {case.schema_version}",
    }


def _run_view(case: Case) -> dict[str, Any]:
    run = case.run
    return {
        "name": run.name or "unnamed run",
        "path": run.path,
        "first_step": format_step(run.first_step),
        "last_step": format_step(run.last_step),
        "steps": _steps_text(run.first_step, run.last_step, case.checkpoints),
        "sources": [{"kind": source.kind, "path": source.path} for source in run.sources],
    }


def _steps_text(first: int | None, last: int | None, checkpoints: list[CheckpointInfo]) -> str:
    if first is not None or last is not None:
        return f"steps {format_step(first)}–{format_step(last)}"
    # No log, but checkpoints: say what was read instead of "no steps read" (issue 11).
    steps = sorted({c.step for c in checkpoints if c.step is not None})
    if steps:
        shown = ", ".join(format_step(step) for step in steps)
        return f"no logged steps; checkpoints at step{'s' if len(steps) > 1 else ''} {shown}"
    if checkpoints:
        return f"no logged steps; {len(checkpoints)} checkpoint(s) without a step"
    return "no steps read"


def _checkpoint_view(checkpoint: CheckpointInfo) -> dict[str, str]:
    return {
        "step": format_step(checkpoint.step),
        "path": checkpoint.path,
        "format": checkpoint.format,
        "has_optimizer": format_number(checkpoint.has_optimizer),
        "has_rng": format_number(checkpoint.has_rng),
    }


def _alternative_view(alternative: Alternative) -> dict[str, str]:
    return {
        "category": alternative.category,
        "reason": one_line(alternative.reason),
        "spike_id": alternative.spike_id or MISSING,
    }


def _finding_view(finding: Finding) -> dict[str, Any]:
    return {
        "id": finding.id,
        "category": finding.category,
        "severity": finding.severity,
        "confidence": format_number(parse_number(finding.confidence)),
        "step": format_step(finding.step),
        "layer": finding.layer or MISSING,
        "message": bounded_line(finding.message),
        "evidence": flatten(finding.evidence),
        "threshold": bounded_line(finding.threshold),
        "suggestion": bounded_line(finding.suggestion),
        "source": finding.source,
        "spike_id": finding.spike_id or "",
    }


def _spike_view(spike: Spike) -> dict[str, Any]:
    end = spike.end_step
    return {
        "id": spike.id,
        "metric": spike.metric,
        "onset_step": format_step(spike.onset_step),
        "peak_step": format_step(spike.peak_step),
        "end_step": format_step(end) if end is not None else "not recovered",
        "peak_raw": parse_number(spike.peak_step),
        "alarm_score": _alarm_score_text(spike),
        "baseline": format_number(parse_number(spike.baseline)),
        "peak_value": format_number(parse_number(spike.peak_value)),
        "detectors": ", ".join(spike.detectors) or MISSING,
        "nonfinite": format_number(spike.nonfinite),
    }


def _alarm_score_text(spike: Spike) -> str:
    """The score the detector compared with its threshold, in its unit; NaN/Inf named instead.

    A case written before alarm_score existed shows its magnitude (robust σ of the window).
    """
    if spike.nonfinite:
        return "non-finite"
    score = parse_number(spike.alarm_score)
    if score is None:
        return f"{format_number(parse_number(spike.magnitude))} robust σ"
    unit = "σ (spike score)" if spike.alarm_detector == "spike_score" else "robust σ"
    return f"{format_number(score)} {unit}"


def _story_groups(story: list[StoryEvent], spikes: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cascade per spike, chronological, each event with its offset from the spike's peak."""
    groups: list[dict[str, Any]] = []
    spike_ids = [spike["id"] for spike in spikes]
    grouped_ids = spike_ids + sorted(
        {event.spike_id for event in story if event.spike_id} - set(spike_ids)
    )
    for spike_id in [*grouped_ids, ""]:
        events = [event for event in story if (event.spike_id or "") == spike_id]
        if not events:
            continue
        spike = next((item for item in spikes if item["id"] == spike_id), None)
        peak = spike["peak_raw"] if spike else None
        ordered = sorted(events, key=lambda event: _step_key(event.step))
        groups.append(
            {
                "spike": spike,
                "spike_id": spike_id,
                "events": [_story_event(event, peak) for event in ordered],
            }
        )
    return groups


def _story_event(event: StoryEvent, peak_step: float | None) -> dict[str, Any]:
    lead = parse_number(event.lead_steps)
    step = parse_number(event.step)
    if lead is None and peak_step is not None and step is not None:
        lead = peak_step - step
    return {
        "step": format_step(event.step),
        "offset": _offset_text(lead),
        "signal": event.signal,
        "layer": event.layer or MISSING,
        "description": one_line(event.description),
    }


def _offset_text(lead_steps: float | None) -> str:
    """lead_steps > 0 means before the peak: written as the step offset a reader counts with."""
    if lead_steps is None:
        return MISSING
    if lead_steps == 0:
        return "at peak"
    distance = format_step(abs(lead_steps))
    return f"{distance} before peak" if lead_steps > 0 else f"{distance} after peak"


def _change_point_view(change: ChangePoint) -> dict[str, Any]:
    before = parse_number(change.before_mean)
    after = parse_number(change.after_mean)
    ratio = MISSING
    if before and after is not None:
        ratio = f"×{format_number(after / before)}"
    return {
        "metric": change.metric,
        "step": format_step(change.step),
        "detector": change.detector,
        "before": format_number(before),
        "after": format_number(after),
        "ratio": ratio,
    }


def _severity_counts(findings: list[Finding]) -> str:
    counts = [
        f"{sum(1 for f in findings if f.severity == level)} {level}"
        for level in SEVERITIES
        if any(f.severity == level for f in findings)
    ]
    return ", ".join(counts) + "; most important first" if counts else "none"


def _other_metrics(case: Case) -> list[dict[str, str]]:
    """Series not on the main chart: name, points charted, range and last value."""
    series_map = case.chart_series
    charted = set(main_chart_metrics(series_map))
    names = list(case.metrics)
    names += [name for name in sorted(series_map) if name not in names]
    rows = []
    for name in names:
        if name in charted:
            continue
        series = series_map.get(name, {})  # a metric with no points has no chart series
        values = [parse_number(value) for value in series.get("values", [])]
        finite = [value for value in values if value is not None and math.isfinite(value)]
        rows.append(
            {
                # one_line: a logged metric name may hold a newline; a cell stays on one line.
                "name": one_line(name),
                "points": str(len(values)) if series else "not charted",
                "low": format_number(min(finite)) if finite else MISSING,
                "high": format_number(max(finite)) if finite else MISSING,
                "last": format_number(values[-1]) if values else MISSING,
            }
        )
    return rows


def _layer_tables(layers: LayerHeatmap | None) -> list[dict[str, Any]]:
    """The layers that moved most, per measure: where the heat map's dark cells are, by name."""
    if layers is None:
        return []
    steps = layers.steps
    tables = []
    for key, title in MEASURES:
        matrix = layers.measure(key)
        if not matrix:
            continue
        ranked: list[tuple[float, str, int, float | None]] = []
        for name, row in zip(layers.names, matrix, strict=False):
            values = [parse_number(value) for value in row]
            finite = [
                (value, index)
                for index, value in enumerate(values)
                if value is not None and math.isfinite(value)
            ]
            if not finite:
                continue
            peak, index = max(finite, key=lambda pair: (pair[0], -pair[1]))
            ranked.append((peak, name, index, values[-1]))
        ranked.sort(key=lambda item: (-item[0], item[1]))
        growth = key == "norm_growth"
        tables.append(
            {
                "title": title,
                "unit": MEASURE_UNITS.get(key, ""),
                "has_window": growth,
                "rows": [
                    {
                        "layer": name,
                        "peak": format_number(peak),
                        "step": format_step(steps[index]) if index < len(steps) else MISSING,
                        "last": format_number(last),
                        "window": _growth_over_window(peak, steps, index) if growth else "",
                    }
                    for peak, name, index, last in ranked[:TOP_LAYERS]
                ],
            }
        )
    return tables


def _growth_over_window(rate_per_step: float, steps: Sequence[int], index: int) -> str:
    """A per-step growth rate as the factor over its checkpoint window ("×1.93 since step 120"),
    the number the weight_norm_growth finding prints."""
    if not 0 < index < len(steps):
        return MISSING
    step, previous = steps[index], steps[index - 1]
    if step <= previous or rate_per_step <= -1:
        return MISSING
    try:
        factor = (1 + rate_per_step) ** (step - previous)
    except OverflowError:  # a rate no checkpoint gives (a hand-edited case.json): beyond float
        factor = math.inf
    return f"×{format_number(factor)} since step {format_step(previous)}"


def _step_key(step: float | None, kind: str = "") -> tuple[float, str]:
    return (float(step) if step is not None else float("inf"), kind)
