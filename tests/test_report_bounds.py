"""`tscope report` re-renders a case.json or cluster.json that may come from anyone: its charts
draw what analysis would, whatever the file lists (red team, session 25: a 2,000 × 2,000 layer
matrix in 16 MB of case.json drew 555 MB of SVG in 3.3 GB; 2,000 charted runs of 2,000 points in
a 26 MB cluster.json drew a 46 MB cluster.html)."""

from __future__ import annotations

import json

from tscope.model.case_parts import HEATMAP_MAX_LAYERS, LayerHeatmap
from tscope.model.cluster import CHART_MAX_RUNS, CHART_POINTS
from tscope.model.cluster_file import ClusterFile
from tscope.render.cluster_plot import chart_runs
from tscope.render.heatmap import HEATMAP_MAX_STEPS, layers_heatmap


def test_a_huge_layer_matrix_draws_the_layers_analysis_would():
    size = 1_000
    row = tuple(float(j % 2) for j in range(size))
    layers = LayerHeatmap(
        steps=tuple(range(1, size + 1)),
        names=tuple(f"layer{i}" for i in range(size)),
        update_ratio=(row,) * size,
        norm_growth=(row,) * size,
    )
    chart = layers_heatmap(layers)
    assert chart is not None
    assert "layer0" in chart.svg and "layer41" not in chart.svg and "layer999" not in chart.svg
    assert len(chart.svg) < 3_000_000
    assert any(f"first {HEATMAP_MAX_LAYERS} of 1,000 layers" in note for note in chart.notes)
    assert any(f"{HEATMAP_MAX_STEPS} of 1,000 checkpoint steps" in note for note in chart.notes)


def test_a_crafted_cluster_chart_draws_the_runs_analysis_would():
    run = {"name": "r", "status": "stable", "steps": list(range(2_000)), "values": [1.0] * 2_000}
    payload = {
        "schema_version": "1",
        "tool_version": "0.1.0",
        "runs_dir": "runs",
        "runs": [],
        "clusters": [],
        "chart": {"runs": [dict(run, name=f"r{i}") for i in range(500)]},
    }
    report = ClusterFile.from_dict(json.loads(json.dumps(payload)))
    runs = chart_runs(report)
    assert len(runs) == CHART_MAX_RUNS
    assert all(len(r.steps) <= CHART_POINTS for r in runs)
