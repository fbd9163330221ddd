"""A bad batch in a log without the learning rate (stock nanoGPT prints none): the loss alone
names it, at a medium confidence and with the LR jump it cannot rule out, when the break stands
out and is undone at the very next step (analyzers/explainers/bad_batch_logs.py,
NO_LR_AFTER_FRACTION). A blind set's stock nanoGPT log, session 27: 1.95 -> 10.45 -> 2.01 at a
batch of binary bytes was "undetermined". A break that lingers stays undetermined."""

from __future__ import annotations

import numpy as np
import pytest
from synthetic import make_run

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.bad_batch_logs import BadBatchLogsExplainer
from tscope.model.metric_names import LOSS

STEPS = 600
AT = 400


def _loss(after: float, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(STEPS, dtype=float)
    loss = (2.0 + 2.5 * np.exp(-t / 80)) * (1 + 0.02 * rng.standard_normal(STEPS))
    trend = 2.0 + 2.5 * np.exp(-AT / 80)
    loss[AT] = trend + 8.0  # one batch of binary bytes
    loss[AT + 1] = trend + after * 8.0
    return loss


@pytest.mark.parametrize("seed", range(3))
def test_a_break_undone_at_once_is_a_bad_batch_without_the_lr(seed: int) -> None:
    run = make_run({LOSS: _loss(after=0.02, seed=seed)}, first_step=0)
    (finding,) = BadBatchLogsExplainer().run(Evidence(run))
    assert finding.step == AT and "learning rate was not logged" in finding.message
    assert finding.confidence < 0.8  # the best of two explanations, not a certainty


@pytest.mark.parametrize("seed", range(3))
def test_a_break_that_lingers_is_left_undetermined_without_the_lr(seed: int) -> None:
    run = make_run({LOSS: _loss(after=0.45, seed=seed)}, first_step=0)
    assert BadBatchLogsExplainer().run(Evidence(run)) == []
