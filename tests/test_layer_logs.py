"""Per-layer series users log themselves: the naming schemes, and the first layer to deviate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tscope.model.layer_metrics import (
    ACT_KURTOSIS,
    ACT_MAX,
    GRAD_MAX,
    GRAD_NORM,
    WEIGHT_NORM,
    LayerMetric,
    layer_metric,
)
from tscope.pipeline import analyze_run

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layer_tb"
PLANTED = json.loads((DATA / "planted.json").read_text())["runs"]
ALERTS = ("warning", "critical")


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("layers/blocks.1.fc1.weight/grad_norm", LayerMetric("blocks.1.fc1.weight", GRAD_NORM)),
        ("grad_norm/blocks.1.fc1.weight", LayerMetric("blocks.1.fc1.weight", GRAD_NORM)),
        ("train/grad-norm/layer_3", LayerMetric("layer_3", GRAD_NORM)),
        (
            "grad_2.0_norm/model.layers.0.mlp.weight",
            LayerMetric("model.layers.0.mlp.weight", GRAD_NORM),
        ),
        (
            "optim/grad/transformer.blocks.0.att_proj.weight.norm",
            LayerMetric("transformer.blocks.0.att_proj.weight", GRAD_NORM),
        ),
        (
            "optim/grad/transformer.blocks.0.att_proj.weight.max",
            LayerMetric("transformer.blocks.0.att_proj.weight", GRAD_MAX),
        ),
        ("optim/param/wte.weight.norm", LayerMetric("wte.weight", WEIGHT_NORM)),
        ("weights/blocks.0.fc2.weight/norm", LayerMetric("blocks.0.fc2.weight", WEIGHT_NORM)),
        ("param_norm/decoder.layers.2", LayerMetric("decoder.layers.2", WEIGHT_NORM)),
        ("activations/blocks.1.fc1/max", LayerMetric("blocks.1.fc1", ACT_MAX)),
        ("activations/blocks.1.fc1/kurtosis", LayerMetric("blocks.1.fc1", ACT_KURTOSIS)),
        ("encoder.layer.3.attention/grad", LayerMetric("encoder.layer.3.attention", GRAD_NORM)),
    ],
)
def test_common_per_layer_names_are_recognized(name: str, expected: LayerMetric) -> None:
    assert layer_metric(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        "train/loss",
        "train/grad_norm",
        "grad_norm",
        "grad_2.0_norm_total",
        "eval/grad_norm",
        "grad_norm/total",
        "train/learning_rate",
        "lm loss",
        "moe/moe.router/expert_0_share",
    ],
)
def test_whole_run_series_are_not_layers(name: str) -> None:
    assert layer_metric(name) is None


def test_healthy_tensorboard_run_gets_no_layer_finding_and_no_alarm() -> None:
    findings = analyze_run(DATA / "healthy").case.findings
    assert [f for f in findings if f.severity in ALERTS] == []
    assert not [f for f in findings if f.category == "layer_origin"]


def test_per_layer_tensorboard_series_name_the_planted_layer_first() -> None:
    planted = PLANTED["layer_lr_bug"]
    analysis = analyze_run(DATA / "layer_lr_bug")
    assert [s.kind for s in analysis.run.sources] == ["tensorboard"]
    origin = [f for f in analysis.case.findings if f.category == "layer_origin"]
    assert len(origin) == 1
    found = origin[0]
    module = planted["layer"].rsplit(".", 1)[0]  # activations are logged per module
    assert found.layer in (planted["layer"], module)
    assert found.step is not None and found.step > planted["step"]
    assert found.evidence["lead_steps"] > 0
    assert found.step + found.evidence["lead_steps"] == found.evidence["loss_incident_step"]
