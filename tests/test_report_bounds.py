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


def test_a_crafted_cluster_json_is_bounded_before_it_is_normalized(tmp_path):
    # Encoded and decoded again whole, 2,000 charted runs × 2,000 points (26 MB) took 1.2 GB;
    # the chart section is cut to what analysis writes before anything else is done with it.
    from tscope.model.case import SCHEMA_VERSION
    from tscope.render.cluster_report import load_cluster_payload

    run = {"name": "r", "status": "stable", "steps": list(range(2_000)), "values": [1.0] * 2_000}
    payload = {
        "schema_version": SCHEMA_VERSION,
        "tool_version": "0.1.0",
        "runs_dir": "runs",
        "runs": [],
        "clusters": [],
        "chart": {"runs": [dict(run, name=f"r{i}") for i in range(500)]},
    }
    (tmp_path / "cluster.json").write_text(json.dumps(payload))
    loaded = load_cluster_payload(tmp_path)
    charted = loaded["chart"]["runs"]
    assert len(charted) == CHART_MAX_RUNS
    assert max(len(r["steps"]) for r in charted) <= CHART_POINTS
    assert charted[0]["steps"][:2] == [0, 7]  # every 7th of 2,000 points: 286 ≤ 300


def _replay_case() -> dict:
    from test_render_replay_payloads import replay_payload

    return json.loads(json.dumps(replay_payload()))


def test_a_crafted_replay_layer_series_draws_the_layers_and_steps_analysis_would(tmp_path):
    # 1,000 layers × 600 steps per statistic drew a 14 MB SVG in 0.4 GB (session 26).
    from tscope.render import case_from_payload
    from tscope.render.replay_layers import (
        MAX_DRAWN_LAYERS,
        MAX_DRAWN_STEPS,
        layer_statistics_chart,
        read_layer_series,
    )

    payload = _replay_case()
    crafted = {
        "layers": [f"model.layers.{i}.w" for i in range(1_000)],
        "steps": list(range(600)),
        "values": [[(i * 7 + j) % 13 / 13 for j in range(600)] for i in range(1_000)],
    }
    for name in list(payload["replay"]["layer_series"]):
        payload["replay"]["layer_series"][name] = crafted
    section = case_from_payload(payload, "crafted").replay
    assert section is not None
    drawn = read_layer_series(section.layer_series, section.key_statistics())
    assert all(len(item.layers) == MAX_DRAWN_LAYERS for item in drawn)
    assert all(len(item.steps) <= MAX_DRAWN_STEPS for item in drawn)
    chart = layer_statistics_chart(section)
    assert chart is not None and len(chart.svg) < 2_000_000
    assert any(
        f"{MAX_DRAWN_LAYERS} layers with the largest values of the 1,000" in n for n in chart.notes
    )


def test_a_crafted_chart_series_is_read_to_the_chart_bound():
    # A loss series of 1,000,000 points (13 MB of case.json) took 0.8 GB to re-render.
    from tscope.model.case_parts import CHART_BUCKETS
    from tscope.render import case_from_payload

    payload = _replay_case()
    points = list(range(1_000_000))
    payload["chart_series"]["train/loss"] = {
        "steps": points,
        "values": points,
        "min": points,
        "max": points,
    }
    case = case_from_payload(payload, "crafted")
    series = case.chart_series["train/loss"]
    assert all(len(series[key]) <= CHART_BUCKETS for key in ("steps", "values", "min", "max"))
    assert series["steps"][:2] == [0, 834]
