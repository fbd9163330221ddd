"""Renderers: case.json (the source of truth), case.html, and case.md with its SVG charts.

    render_case(case, "out/")                           # after an analysis
    render_case(load_case("out/"), "out/", ("html",))   # `tscope report`: no recomputation

Both calls go through the payload exactly as case.json holds it, read back as a typed Case
(`Case.from_dict`), so a report re-rendered from case.json is byte-identical to the one written
at analysis time.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tscope.model.case import Case
from tscope.output_writer import write_texts
from tscope.render.charts import Chart, incident_chart, incident_zoom_chart, other_metrics_chart
from tscope.render.heatmap import layers_heatmap
from tscope.render.html import render_html
from tscope.render.json_file import normalized_payload_and_text
from tscope.render.markdown import render_markdown
from tscope.render.replay_charts import replay_chart, whatif_chart
from tscope.render.replay_layers import layer_statistics_chart
from tscope.render.report_files import (
    FORMATS,
    check_formats,
    output_directory,
    read_payload,
    report_texts,
    typed_payload,
)

CASE_JSON = "case.json"
CASE_HTML = "case.html"
CASE_MD = "case.md"
# The charts case.md links as images; case.html inlines the same SVG text.
CHART_FILES = {
    "chart": "case-chart.svg",
    "zoom": "case-zoom.svg",
    "metrics": "case-metrics.svg",
    "layers": "case-layers.svg",
}
# Only a case that `tscope replay` wrote has these: the replayed loss, the what-ifs, the layers.
REPLAY_CHART_FILES = {
    "replay": "case-replay.svg",
    "whatif": "case-whatif.svg",
    "replay_layers": "case-replay-layers.svg",
}
ALL_CHART_FILES = {**CHART_FILES, **REPLAY_CHART_FILES}

__all__ = [
    "CASE_JSON",
    "CHART_FILES",
    "FORMATS",
    "REPLAY_CHART_FILES",
    "load_case",
    "load_case_payload",
    "render_case",
]


def render_case(
    case_or_payload: Case | dict[str, Any],
    out_dir: str | os.PathLike[str],
    formats: Sequence[str] = FORMATS,
) -> list[Path]:
    """Write the requested renderings into out_dir and return the paths written, in order."""
    check_formats(formats)
    raw = case_or_payload.to_dict() if isinstance(case_or_payload, Case) else case_or_payload
    payload, payload_text = normalized_payload_and_text(raw)
    case = case_from_payload(payload, "the case payload")  # as `tscope report` reads it back
    directory = output_directory(out_dir, "the case")
    charts = draw_charts(case) if {"html", "md"} & set(formats) else {}
    texts = report_texts(
        formats,
        (CASE_JSON, CASE_HTML, CASE_MD),
        lambda: payload_text,
        lambda: render_html(case, charts),
        lambda: render_markdown(case, charts, ALL_CHART_FILES),
        ((ALL_CHART_FILES[name], chart.svg) for name, chart in charts.items()),
    )
    return write_texts(directory, texts)


def draw_charts(case: Case) -> dict[str, Chart]:
    """Every chart the case has data for, keyed as in CHART_FILES and REPLAY_CHART_FILES."""
    drawn = {
        "chart": incident_chart(case),
        "zoom": incident_zoom_chart(case),
        "metrics": other_metrics_chart(case),
        "layers": layers_heatmap(case.layers),
        "replay": replay_chart(case.replay),
        "whatif": whatif_chart(case.replay),
        "replay_layers": layer_statistics_chart(case.replay),
    }
    return {name: chart for name, chart in drawn.items() if chart is not None}


def load_case(case_dir_or_file: str | os.PathLike[str]) -> Case:
    """The case in a case folder's case.json (or the file itself), typed: what `tscope report`
    renders. A file of another schema or with a field of the wrong type ends in one line."""
    file, payload = _read_case_file(case_dir_or_file)
    return case_from_payload(payload, str(file))


def case_from_payload(payload: dict[str, Any], where: str) -> Case:
    return typed_payload(Case.from_dict, payload, where, "analyze")


def load_case_payload(case_dir_or_file: str | os.PathLike[str]) -> dict[str, Any]:
    """case.json from a case folder (or the file itself) as its JSON object, checked enough to
    render."""
    return _read_case_file(case_dir_or_file)[1]


def _read_case_file(case_dir_or_file: str | os.PathLike[str]) -> tuple[Path, dict[str, Any]]:
    return read_payload(
        case_dir_or_file,
        CASE_JSON,
        "case",
        "analyze",
        "Point at the folder `tscope analyze --out` wrote, or at its case.json",
    )
