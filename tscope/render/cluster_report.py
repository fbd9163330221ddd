"""Renderers of the cluster report: cluster.json (the source of truth), cluster.html, and
cluster.md with its SVG charts.

    render_cluster(report, "sweep-cluster/")                                  # after `cluster`
    render_cluster(load_cluster_payload("sweep-cluster/"), "sweep-cluster/")  # re-render only

Both calls go through the payload exactly as cluster.json holds it, so a report re-rendered from
cluster.json into the same folder is byte-identical to the one written after the analysis. The
pieces are the case renderers': the same JSON writer, Jinja environment, escaping filters, SVG
primitives and number formats.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from markupsafe import Markup

from tscope.errors import UnreadableInput
from tscope.model.cluster import CHART_MAX_RUNS, CHART_POINTS, ClusterReport
from tscope.model.cluster_file import ClusterFile
from tscope.output_writer import write_texts
from tscope.render.charts import Chart
from tscope.render.cluster_charts import aligned_chart, overview_chart
from tscope.render.cluster_view import aligned_chart_name, build_cluster_view
from tscope.render.html import inline_html
from tscope.render.json_file import normalized_payload_and_text
from tscope.render.markdown import md_cell, md_code, md_text
from tscope.render.report_files import (
    FORMATS,
    check_formats,
    output_directory,
    read_payload,
    report_texts,
    typed_payload,
)
from tscope.render.view import template_environment

CLUSTER_JSON = "cluster.json"
CLUSTER_HTML = "cluster.html"
CLUSTER_MD = "cluster.md"
OVERVIEW_CHART = "overview"

__all__ = [
    "CLUSTER_HTML",
    "CLUSTER_JSON",
    "CLUSTER_MD",
    "chart_file_name",
    "load_cluster_payload",
    "render_cluster",
]


def render_cluster(
    report_or_payload: ClusterReport | dict[str, Any],
    out_dir: str | os.PathLike[str],
    formats: Sequence[str] = FORMATS,
) -> list[Path]:
    """Write the requested renderings into out_dir and return the paths written, in order."""
    check_formats(formats)
    raw = (
        report_or_payload.to_dict()
        if isinstance(report_or_payload, ClusterReport)
        else report_or_payload
    )
    payload, payload_text = normalized_payload_and_text(raw)
    report = cluster_file(payload, "the cluster payload")  # as a re-render reads it back
    directory = output_directory(out_dir, "the cluster report")
    pages = bool({"html", "md"} & set(formats))
    charts = draw_cluster_charts(report) if pages else {}
    view = build_cluster_view(report, directory) if pages else {}
    texts = report_texts(
        formats,
        (CLUSTER_JSON, CLUSTER_HTML, CLUSTER_MD),
        lambda: payload_text,
        lambda: render_cluster_html(view, charts),
        lambda: render_cluster_markdown(view, charts),
        ((chart_file_name(name), chart.svg) for name, chart in charts.items()),
    )
    return write_texts(directory, texts)


def cluster_file(payload: dict[str, Any], where: str) -> ClusterFile:
    """The payload typed for the renderers; a field of the wrong type ends in one line."""
    return typed_payload(ClusterFile.from_dict, payload, where, "cluster")


def draw_cluster_charts(report: ClusterFile) -> dict[str, Chart]:
    """The all-runs overview, then one aligned-curves chart per cluster that has data to draw."""
    drawn: dict[str, Chart | None] = {OVERVIEW_CHART: overview_chart(report, len(report.runs))}
    for index, _ in enumerate(report.clusters):
        drawn[aligned_chart_name(index)] = aligned_chart(report, index)
    return {name: chart for name, chart in drawn.items() if chart is not None}


def chart_file_name(chart_name: str) -> str:
    """cluster-chart.svg for the overview, cluster-aligned-1.svg for the first cluster, …"""
    return "cluster-chart.svg" if chart_name == OVERVIEW_CHART else f"cluster-{chart_name}.svg"


def render_cluster_html(view: dict[str, Any], charts: Mapping[str, Chart]) -> str:
    environment = template_environment(autoescape=True)
    environment.filters["inline"] = inline_html
    drawn = {
        name: {"svg": Markup(chart.svg), "notes": list(chart.notes)}
        for name, chart in charts.items()
    }
    return environment.get_template("cluster.html.j2").render(view=view, charts=drawn)


def render_cluster_markdown(view: dict[str, Any], charts: Mapping[str, Chart]) -> str:
    environment = template_environment(autoescape=False)
    environment.filters["md"] = md_text
    environment.filters["md_cell"] = md_cell
    environment.filters["md_code"] = md_code
    drawn = {
        name: {"file": chart_file_name(name), "notes": list(chart.notes)}
        for name, chart in charts.items()
    }
    return environment.get_template("cluster.md.j2").render(view=view, charts=drawn)


def load_cluster_payload(dir_or_file: str | os.PathLike[str]) -> dict[str, Any]:
    """cluster.json from a cluster report folder (or the file itself), checked enough to render."""
    file, payload = read_payload(
        dir_or_file,
        CLUSTER_JSON,
        "cluster",
        "cluster",
        "Point at the folder `tscope cluster --out` wrote, or at its cluster.json",
    )
    if not isinstance(payload.get("runs"), list) or not isinstance(payload.get("clusters"), list):
        raise UnreadableInput(
            str(file),
            "not a tscope cluster file (no runs and clusters lists)",
            "A case.json is rendered by `tscope report`",
        )
    cluster_file(payload, str(file))  # a field of the wrong type: one line naming the file
    _bound_chart(payload)
    return payload


def _bound_chart(payload: dict[str, Any]) -> None:
    """`chart.runs` as analysis bounds it (CHART_MAX_RUNS runs of at most CHART_POINTS points,
    every k-th kept), before the payload is normalized and rendered: a crafted cluster.json of
    2,000 charted runs × 2,000 points (26 MB) took 1.2 GB, encoded and decoded again whole.
    A cluster.json tscope wrote is within the bounds and unchanged."""
    chart = payload.get("chart")
    if not isinstance(chart, dict) or not isinstance(chart.get("runs"), list):
        return
    runs = chart["runs"][:CHART_MAX_RUNS]
    for run in runs:
        if not isinstance(run, dict):
            continue
        for key in ("steps", "values"):
            points = run.get(key)
            if isinstance(points, list) and len(points) > CHART_POINTS:
                run[key] = points[:: -(-len(points) // CHART_POINTS)]
    chart["runs"] = runs
