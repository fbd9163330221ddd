"""A loss that fell by half or more in its first logged points did move: a plateau after it is
info (analyzers/explainers/plateau.py, EARLY_FALL_RATIO). Healthy-run hunt, session 26: a
diffusion model's noise-prediction loss fell 1.11 → 0.37 in its first points and then improved by
a few percent over 5,000 steps; "did not move from step 0" was a warning."""

from __future__ import annotations

import numpy as np
from synthetic import make_run

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.plateau import PlateauExplainer
from tscope.model.metric_names import LOSS


def _plateau(opening: list[float]):
    rng = np.random.default_rng(3)
    level = 0.39 - 0.01 * np.arange(500) / 500 + 0.04 * rng.standard_normal(500)
    run = make_run({LOSS: np.concatenate([opening, level])})
    return [f for f in PlateauExplainer().run(Evidence(run)) if f.category == "loss_plateau"]


def test_a_plateau_after_a_fast_first_fall_is_info():
    (plateau,) = _plateau([1.11, 0.74, 0.52])
    assert plateau.severity == "info"
    assert plateau.message.startswith("After falling from 1.11 in its first logged points")


def test_a_loss_flat_from_its_first_point_stays_a_warning():
    (plateau,) = _plateau([0.40, 0.41, 0.39])
    assert plateau.severity == "warning"
    assert plateau.message.startswith("The loss did not move from step 1")
