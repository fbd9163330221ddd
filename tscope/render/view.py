"""The case payload turned into what the HTML and Markdown templates print, in print order.

Every number is formatted here, every list sorted or grouped here, every missing section given its
empty default here; the templates only lay the strings out and escape them for their format. The
payload is read defensively (`.get` with defaults) because `tscope report` may be handed a case
file written by an older tscope that lacked a later optional section.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import jinja2

from tscope.model.categories import SEVERITIES
from tscope.render.card_view import card_view
from tscope.render.charts import main_chart_metrics
from tscope.render.formatting import (
    MISSING,
    flatten,
    format_number,
    format_step,
    one_line,
    parse_number,
    shown_in_template,
)
from tscope.render.heatmap import MEASURES
from tscope.render.replay_view import replay_view
from tscope.render.series import as_list, as_mapping, as_records
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
    once per run (compiling case.html.j2 and case.md.j2 took longer than rendering them). The
    callers add the same filters every time, so sharing it changes no output."""
    return jinja2.Environment(
        loader=jinja2.PackageLoader(TEMPLATE_PACKAGE, package_path="."),
        autoescape=autoescape,
        finalize=shown_in_template,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        keep_trailing_newline=True,
    )


def build_view(payload: dict[str, Any]) -> dict[str, Any]:
    """Everything a template prints, as plain strings and lists (no numbers left to format)."""
    summary = as_mapping(payload.get("summary"))
    spikes = [_spike_view(spike) for spike in as_records(payload.get("spikes"))]
    status = str(summary.get("status") or "no_data")
    return {
        "run": _run_view(payload),
        "status": status if status in STATUS_LABELS else "unknown",
        "status_label": STATUS_LABELS.get(status, status),
        "verdict": one_line(str(summary.get("verdict") or "No verdict was recorded.")),
        "card": card_view(summary),
        "next_steps": [one_line(str(step)) for step in as_list(summary.get("next_steps"))],
        "no_next_steps": NO_NEXT_STEPS.get(status, "No next step was recorded."),
        "headline": str(summary.get("headline_finding") or ""),
        "findings": [_finding_view(item) for item in as_records(payload.get("findings"))],
        "severity_counts": _severity_counts(as_records(payload.get("findings"))),
        "alternatives": [
            {
                "category": str(item.get("category", "")),
                "reason": one_line(str(item.get("reason", ""))),
                "spike_id": str(item.get("spike_id") or MISSING),
            }
            for item in as_records(payload.get("alternatives"))
        ],
        "spikes": spikes,
        "story_groups": _story_groups(as_records(payload.get("story")), spikes),
        "change_points": [
            _change_point_view(item) for item in as_records(payload.get("change_points"))
        ],
        "events": [
            {
                "step": format_step(item.get("step")),
                "kind": str(item.get("kind", "")),
                "detail": one_line(str(item.get("detail", ""))),
                "source": str(item.get("source", "")),
            }
            for item in sorted(as_records(payload.get("events")), key=_step_key)
        ],
        "limits": [one_line(str(item)) for item in as_list(payload.get("limits"))],
        "caveats": [
            {
                "kind": str(item.get("kind", "")),
                "message": one_line(str(item.get("message", ""))),
                "source": str(item.get("source", "")),
            }
            for item in as_records(payload.get("caveats"))
        ],
        "partial": [
            {"path": str(item.get("path", "")), "problem": one_line(str(item.get("problem", "")))}
            for item in as_records(payload.get("partial"))
        ],
        "checkpoints": [
            {
                "step": format_step(item.get("step")),
                "path": str(item.get("path", "")),
                "format": str(item.get("format", "")),
                "has_optimizer": format_number(bool(item.get("has_optimizer"))),
                "has_rng": format_number(bool(item.get("has_rng"))),
            }
            for item in sorted(as_records(payload.get("checkpoints")), key=_step_key)
        ],
        "config": flatten(as_mapping(as_mapping(payload.get("run")).get("config"))),
        "other_metrics": _other_metrics(payload),
        "layer_tables": _layer_tables(as_mapping(payload.get("layers"))),
        "replay": replay_view(payload),
        "xray": xray_view(payload),
        "tool": _tool_line(payload),
    }


def _run_view(payload: dict[str, Any]) -> dict[str, Any]:
    run = as_mapping(payload.get("run"))
    return {
        "name": str(run.get("name") or "unnamed run"),
        "path": str(run.get("path") or ""),
        "first_step": format_step(run.get("first_step")),
        "last_step": format_step(run.get("last_step")),
        "steps": _steps_text(
            run.get("first_step"), run.get("last_step"), as_records(payload.get("checkpoints"))
        ),
        "sources": [
            {"kind": str(source.get("kind", "")), "path": str(source.get("path", ""))}
            for source in as_records(run.get("sources"))
        ],
    }


def _steps_text(first: Any, last: Any, checkpoints: list[dict[str, Any]]) -> str:
    if first is not None or last is not None:
        return f"steps {format_step(first)}–{format_step(last)}"
    # No log, but checkpoints: say what was read instead of "no steps read" (issue 11).
    steps = sorted({c["step"] for c in checkpoints if isinstance(c.get("step"), int)})
    if steps:
        shown = ", ".join(format_step(step) for step in steps)
        return f"no logged steps; checkpoints at step{'s' if len(steps) > 1 else ''} {shown}"
    if checkpoints:
        return f"no logged steps; {len(checkpoints)} checkpoint(s) without a step"
    return "no steps read"


def _finding_view(finding: dict[str, Any]) -> dict[str, Any]:
    evidence = as_mapping(finding.get("evidence"))
    return {
        "id": str(finding.get("id") or ""),
        "category": str(finding.get("category", "")),
        "severity": str(finding.get("severity", "")),
        "confidence": format_number(parse_number(finding.get("confidence"))),
        "step": format_step(finding.get("step")),
        "layer": str(finding.get("layer") or MISSING),
        "message": one_line(str(finding.get("message", ""))),
        "evidence": flatten(evidence),
        "threshold": one_line(str(finding.get("threshold") or "")),
        "suggestion": one_line(str(finding.get("suggestion") or "")),
        "source": str(finding.get("source") or ""),
        "spike_id": str(finding.get("spike_id") or ""),
    }


def _spike_view(spike: dict[str, Any]) -> dict[str, Any]:
    end = spike.get("end_step")
    return {
        "id": str(spike.get("id", "")),
        "metric": str(spike.get("metric", "")),
        "onset_step": format_step(spike.get("onset_step")),
        "peak_step": format_step(spike.get("peak_step")),
        "end_step": format_step(end) if end is not None else "not recovered",
        "peak_raw": parse_number(spike.get("peak_step")),
        "alarm_score": _alarm_score_text(spike),
        "baseline": format_number(parse_number(spike.get("baseline"))),
        "peak_value": format_number(parse_number(spike.get("peak_value"))),
        "detectors": ", ".join(str(name) for name in as_list(spike.get("detectors"))) or MISSING,
        "nonfinite": format_number(bool(spike.get("nonfinite"))),
    }


def _alarm_score_text(spike: dict[str, Any]) -> str:
    """The score the detector compared with its threshold, in its unit; NaN/Inf named instead.

    A case written before alarm_score existed shows its magnitude (robust σ of the window).
    """
    if spike.get("nonfinite"):
        return "non-finite"
    score = parse_number(spike.get("alarm_score"))
    if score is None:
        magnitude = parse_number(spike.get("magnitude"))
        return f"{format_number(magnitude)} robust σ" if magnitude is not None else MISSING
    unit = "σ (spike score)" if spike.get("alarm_detector") == "spike_score" else "robust σ"
    return f"{format_number(score)} {unit}"


def _story_groups(
    story: list[dict[str, Any]], spikes: list[dict[str, Any]]
) -> list[dict[str, Any]]:
    """The cascade per spike, chronological, each event with its offset from the spike's peak."""
    groups: list[dict[str, Any]] = []
    spike_ids = [spike["id"] for spike in spikes]
    grouped_ids = spike_ids + sorted(
        {str(event.get("spike_id")) for event in story if event.get("spike_id")} - set(spike_ids)
    )
    for spike_id in [*grouped_ids, ""]:
        events = [event for event in story if str(event.get("spike_id") or "") == spike_id]
        if not events:
            continue
        spike = next((item for item in spikes if item["id"] == spike_id), None)
        peak = spike["peak_raw"] if spike else None
        groups.append(
            {
                "spike": spike,
                "spike_id": spike_id,
                "events": [_story_event(event, peak) for event in sorted(events, key=_step_key)],
            }
        )
    return groups


def _story_event(event: dict[str, Any], peak_step: float | None) -> dict[str, Any]:
    lead = parse_number(event.get("lead_steps"))
    step = parse_number(event.get("step"))
    if lead is None and peak_step is not None and step is not None:
        lead = peak_step - step
    return {
        "step": format_step(event.get("step")),
        "offset": _offset_text(lead),
        "signal": str(event.get("signal", "")),
        "layer": str(event.get("layer") or MISSING),
        "description": one_line(str(event.get("description", ""))),
    }


def _offset_text(lead_steps: float | None) -> str:
    """lead_steps > 0 means before the peak: written as the step offset a reader counts with."""
    if lead_steps is None:
        return MISSING
    if lead_steps == 0:
        return "at peak"
    distance = format_step(abs(lead_steps))
    return f"{distance} before peak" if lead_steps > 0 else f"{distance} after peak"


def _change_point_view(change: dict[str, Any]) -> dict[str, Any]:
    before = parse_number(as_mapping(change.get("before")).get("mean"))
    after = parse_number(as_mapping(change.get("after")).get("mean"))
    ratio = MISSING
    if before and after is not None:
        ratio = f"×{format_number(after / before)}"
    return {
        "metric": str(change.get("metric", "")),
        "step": format_step(change.get("step")),
        "detector": str(change.get("detector", "")),
        "before": format_number(before),
        "after": format_number(after),
        "ratio": ratio,
    }


def _severity_counts(findings: list[dict[str, Any]]) -> str:
    counts = [
        f"{sum(1 for f in findings if f.get('severity') == level)} {level}"
        for level in SEVERITIES
        if any(f.get("severity") == level for f in findings)
    ]
    return ", ".join(counts) + "; most important first" if counts else "none"


def _other_metrics(payload: dict[str, Any]) -> list[dict[str, str]]:
    """Series not on the main chart: name, points charted, range and last value."""
    charted = set(main_chart_metrics(as_mapping(payload.get("chart_series"))))
    series_map = as_mapping(payload.get("chart_series"))
    names = [str(name) for name in as_list(payload.get("metrics"))]
    names += [name for name in sorted(series_map) if name not in names]
    rows = []
    for name in names:
        if name in charted:
            continue
        series = as_mapping(series_map.get(name))
        values = [parse_number(value) for value in as_list(series.get("values"))]
        finite = [value for value in values if value is not None and math.isfinite(value)]
        rows.append(
            {
                "name": name,
                "points": str(len(values)) if series else "not charted",
                "low": format_number(min(finite)) if finite else MISSING,
                "high": format_number(max(finite)) if finite else MISSING,
                "last": format_number(values[-1]) if values else MISSING,
            }
        )
    return rows


def _layer_tables(layers: dict[str, Any]) -> list[dict[str, Any]]:
    """The layers that moved most, per measure: where the heat map's dark cells are, by name."""
    steps = as_list(layers.get("steps"))
    names = [str(name) for name in as_list(layers.get("names"))]
    tables = []
    for key, title in MEASURES:
        matrix = as_list(layers.get(key))
        if not matrix:
            continue
        ranked: list[tuple[float, str, int, float | None]] = []
        for name, row in zip(names, matrix, strict=False):
            values = [parse_number(value) for value in as_list(row)]
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


def _growth_over_window(rate_per_step: float, steps: list[Any], index: int) -> str:
    """A per-step growth rate as the factor over its checkpoint window ("×1.93 since step 120"),
    the number the weight_norm_growth finding prints."""
    step, previous = (
        (parse_number(steps[index]), parse_number(steps[index - 1]))
        if 0 < index < len(steps)
        else (None, None)
    )
    if step is None or previous is None or step <= previous or rate_per_step <= -1:
        return MISSING
    factor = (1 + rate_per_step) ** (step - previous)
    return f"×{format_number(factor)} since step {format_step(previous)}"


def _tool_line(payload: dict[str, Any]) -> str:
    tool = as_mapping(payload.get("tool"))
    version = tool.get("version", "?")
    return f"tscope {version}, case schema {payload.get('schema_version', '?')}"


def _step_key(record: dict[str, Any]) -> tuple[float, str]:
    step = parse_number(record.get("step"))
    return (step if step is not None else float("inf"), str(record.get("kind", "")))
