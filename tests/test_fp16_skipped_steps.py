"""Steps an fp16 loss scaler skips are not a NaN loss (tests/data/fp16_scaler_run/,
fixtures/make_fp16_scaler_run.py: a healthy plain-torch run under fp16 autocast and GradScaler,
logging what the HF Trainer logs: the loss, the gradient norm after unscaling, the LR).

The scaler grows its scale every 50 clean steps and each growth past fp16's range overflows: the
gradient norm is inf at those steps while the loss is the step's real loss, and the scaler skips
the update. The Trainer's logging_nan_inf_filter hides a NaN loss behind a running mean, so a
non-finite gradient norm was read as a hidden NaN loss: this healthy run was CRITICAL
("train/loss became non-finite"). A model whose loss really went NaN keeps non-finite gradients
to the end (tests/test_fixture_runs.py's lr_blowup, still nan_loss).
"""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

import tscope
from tscope.analyzers.signals import loss_series
from tscope.model.metric_names import GRAD_NORM, LOSS
from tscope.pipeline import analyze_run

FIXTURE = Path(__file__).resolve().parent / "data" / "fp16_scaler_run"


def test_the_fixture_has_skipped_steps_and_a_finite_loss() -> None:
    _, run = analyze_run(str(FIXTURE))
    grad_steps, grads = run.series(GRAD_NORM)
    skipped = grad_steps[~np.isfinite(grads)]
    assert skipped.size >= 1
    assert np.isfinite(grads[-1])  # training went on
    _, values = run.series(LOSS)
    assert np.isfinite(values).all()
    # The loss the analyzers read keeps the skipped steps' real values.
    _, read = loss_series(run, LOSS)
    assert np.isfinite(read).all()


def test_a_healthy_fp16_run_is_healthy() -> None:
    case = tscope.analyze(FIXTURE)
    assert case.summary.status == "healthy"
    assert not [f for f in case.findings if f.severity in ("warning", "critical")]
    assert "nan_loss" not in [f.category for f in case.findings]


def test_each_skip_is_noted_as_one() -> None:
    case = tscope.analyze(FIXTURE)
    notes = [
        f
        for f in case.findings
        if f.category == "grad_norm_spike" and f.evidence.get("nonfinite") is True
    ]
    assert notes
    for note in notes:
        assert note.severity == "info"
        assert "skipped" in note.message
        assert not math.isfinite(float(note.evidence["peak_value"]))
