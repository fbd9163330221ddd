"""An fp16 loop whose scaler skips every step from some point on, its scale not logged or logged
under a custom loop's name (a blind set's plain fp16 loop, session 30: `AMP/loss_scale`)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tscope.ingest.logs.names import canonical_metric
from tscope.model.metric_names import LOSS_SCALE
from tscope.pipeline import analyze_run


def _write(folder: Path, dead_from: int, after: str) -> None:
    """300 steps of a falling loss; from `dead_from` the gradient norm is NaN and the loss is
    `after`: "held" (its level: every update skipped) or "nan" (the weights went NaN)."""
    rng = np.random.default_rng(1)
    rows = []
    for step in range(1, 301):
        loss = 5.0 * np.exp(-step / 60) + 2.3 + 0.05 * rng.standard_normal()
        grad = 1.3 + 0.1 * rng.standard_normal()
        if step >= dead_from:
            grad = float("nan")
            loss = 2.33 + 0.05 * rng.standard_normal() if after == "held" else float("nan")
        rows.append({"step": step, "loss": loss, "grad_norm": grad, "lr": 3e-4})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))


def test_every_update_skipped_with_the_scale_unlogged_is_a_loss_scale_collapse(
    tmp_path: Path,
) -> None:
    _write(tmp_path, 236, "held")
    case, _ = analyze_run(str(tmp_path))
    categories = [f.category for f in case.findings]
    assert "nan_loss" not in categories  # the loss never went non-finite
    collapse = next(f for f in case.findings if f.category == "loss_scale_collapse")
    assert collapse.step == 236 and collapse.severity == "critical"
    assert case.summary.card is not None
    assert case.summary.card.cause is not None
    assert case.summary.card.cause.category == "loss_scale_collapse"


def test_weights_gone_nan_are_a_nan_loss_not_a_skipping_scaler(tmp_path: Path) -> None:
    _write(tmp_path, 236, "nan")
    case, _ = analyze_run(str(tmp_path))
    categories = [f.category for f in case.findings]
    assert "loss_scale_collapse" not in categories
    assert "nan_loss" in categories


def test_a_short_dead_stretch_at_the_end_is_not_judged(tmp_path: Path) -> None:
    _write(tmp_path, 295, "held")  # 6 points: fewer than MIN_DEAD_POINTS
    case, _ = analyze_run(str(tmp_path))
    assert "loss_scale_collapse" not in [f.category for f in case.findings]


@pytest.mark.parametrize(
    "name", ["AMP/loss_scale", "amp/scale", "scaler/scale", "GradScaler/scale", "fp16/loss_scale"]
)
def test_a_custom_loops_scaler_names_are_the_loss_scale(name: str) -> None:
    assert canonical_metric(name) == LOSS_SCALE


@pytest.mark.parametrize("name", ["amp/loss", "scale", "fp16/grad_norm"])
def test_other_names_in_those_groups_are_not(name: str) -> None:
    assert canonical_metric(name) != LOSS_SCALE
