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


def _clipped_run(loss_falls: bool, offset: float = 0.0):
    """Gradient norms ~9× the clip threshold from the start (a regression fine-tune with the
    Trainer's default max_grad_norm 1.0, healthy-run hunt session 26), the loss falling or not."""
    from synthetic import make_run

    from tscope.model import LogRead
    from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE, LOSS

    rng = np.random.default_rng(1)
    steps = np.arange(600)
    loss = 0.5 * np.exp(-steps / 150) if loss_falls else np.full(600, 0.5)
    settings = LogRead(
        kind="synthetic",
        path="args.json",
        metrics=LogRead.rows_to_table([], "args.json"),
        config={"max_grad_norm": 1.0},
    )
    return make_run(
        {
            LOSS: offset + loss * (1 + 0.05 * rng.standard_normal(600)),
            GRAD_NORM: 9.0 * (1 + 0.2 * rng.standard_normal(600)),
            LEARNING_RATE: np.full(600, 1e-4),
        },
        extra_reads=[settings],
    )


def _grad_norm_high(run):
    from tscope.analyzers.base import Evidence
    from tscope.analyzers.explainers.grad_norm import GradNormExplainer

    return [f for f in GradNormExplainer().run(Evidence(run)) if f.category == "grad_norm_high"]


def test_norms_far_above_the_clip_while_the_loss_falls_are_not_an_instability():
    (high,) = _grad_norm_high(_clipped_run(loss_falls=True))
    assert high.evidence["reference"] == "clip"
    assert high.severity == "info"
    assert "the run learned with its steps clipped" in high.message
    (flat,) = _grad_norm_high(_clipped_run(loss_falls=False))
    assert flat.severity == "warning"


def test_a_loss_negative_by_design_that_falls_is_learning_too(tmp_path):
    # A Gaussian NLL converging below zero: "fell 20%" is judged against the level's size.
    (high,) = _grad_norm_high(_clipped_run(loss_falls=True, offset=-0.6))
    assert high.severity == "info"
