"""A run that starts from a trained model may already fit its data: a flat loss with its LR and
gradients logged and flowing is context, not a stuck run (analyzers/explainers/plateau.py,
PRETRAINED_KINDS). Blind set, session 27: a healthy short fine-tune, 1.86 -> ~1.7 over 300 noisy
steps at LR 3e-4, warned "did not move". Nothing showing that it learns keeps the warning."""

from __future__ import annotations

import numpy as np
import pytest
from synthetic import make_run

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.plateau import PlateauExplainer
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE, LOSS

POINTS = 300


def _plateau(start: float, lr: float | None, grad: float | None):
    rng = np.random.default_rng(5)
    series = {LOSS: start - 0.05 * np.arange(POINTS) / POINTS + 0.15 * rng.standard_normal(POINTS)}
    if lr is not None:
        series[LEARNING_RATE] = np.full(POINTS, lr)
    if grad is not None:
        series[GRAD_NORM] = grad * (1 + 0.1 * rng.standard_normal(POINTS))
    run = make_run(series)
    return [f for f in PlateauExplainer().run(Evidence(run)) if f.category == "loss_plateau"]


def test_a_flat_fine_tune_whose_lr_and_gradients_flow_is_info():
    (plateau,) = _plateau(1.85, lr=3e-4, grad=0.8)
    assert plateau.severity == "info" and plateau.evidence["pretrained_start"] is True
    assert "starts from a trained model" in plateau.message


@pytest.mark.parametrize(
    ("start", "lr", "grad"),
    [
        (1.85, 3e-4, None),  # the gradients are not logged: nothing shows it learns
        (1.85, None, 0.8),  # the LR is not logged
        (1.85, 3e-4, 1e-9),  # the gradients do not flow: frozen or detached
        (1.85, 1e-9, 0.8),  # the LR is near zero
        (9.5, 3e-4, 0.8),  # from scratch (above 7 nats): a stuck pre-training run
    ],
)
def test_a_flat_loss_with_nothing_showing_learning_stays_a_warning(start, lr, grad):
    (plateau,) = _plateau(start, lr=lr, grad=grad)
    assert plateau.severity == "warning" and plateau.evidence["pretrained_start"] is False
