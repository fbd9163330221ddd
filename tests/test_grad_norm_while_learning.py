"""grad_norm_high is an instability only when the loss does not fall with it: a classifier stuck
at its class prior has small gradients, and they grow as it starts learning (a healthy-run hunt
of session 25: two real BERT classifier runs, ×38 "far too high" while the loss fell 0.66 →
0.26 and eval accuracy rose 0.63 → 0.91). The shapes below are that run's, in a CSV."""

from __future__ import annotations

import csv

import numpy as np

from tscope.pipeline import analyze_run


def _log(path, loss_falls: bool) -> None:
    rng = np.random.default_rng(0)
    rows = []
    for step in range(1, 901):
        escaped = step > 400
        grad = 0.4 if not escaped else 0.4 + 15.0 * min(1.0, (step - 400) / 250)
        loss = 0.66
        if escaped and loss_falls:
            loss = 0.66 - 0.4 * min(1.0, (step - 400) / 300)
        rows.append(
            {
                "step": step,
                "loss": loss * (1 + 0.05 * rng.standard_normal()),
                "grad_norm": grad * (1 + 0.2 * rng.standard_normal()),
                "lr": 2e-5,
            }
        )
    with open(path / "metrics.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)


def test_a_gradient_norm_growing_as_the_loss_falls_is_learning(tmp_path):
    _log(tmp_path, loss_falls=True)
    case, _ = analyze_run(str(tmp_path))
    high = [f for f in case.findings if f.category == "grad_norm_high"]
    assert high and high[0].severity == "info"
    assert "the model began learning" in high[0].message


def test_the_same_rise_with_a_flat_loss_stays_a_warning(tmp_path):
    _log(tmp_path, loss_falls=False)
    case, _ = analyze_run(str(tmp_path))
    high = [f for f in case.findings if f.category == "grad_norm_high"]
    assert high and high[0].severity == "warning"
