"""Where a divergence began when its climb starts slowly: an LR that keeps growing (an
ExponentialLR with gamma > 1) takes the loss up a little at a time long before it blows up.

A blind set's Lightning run (session 28): the loss fell to 2.24 by step 459, crept up to 2.8-2.9
by 590-640 and 3.2-3.4 by 660-770 as the LR passed 0.05-0.4, crossed 1.5× its best at 779 and
blew up. The onset was dated 779 ("it began climbing there"): the level the walk back measured
from was the trend's end over a window that was itself the slow climb.
"""

from __future__ import annotations

import numpy as np
import pytest

from tests.synthetic import make_run
from tscope.model.metric_names import LEARNING_RATE, LOSS
from tscope.pipeline import build_case

STEPS = 900
CREEP_FROM = 460


def _loss(seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(1, STEPS + 1, dtype=float)
    loss = 2.2 + 3.3 * np.exp(-t / 60)
    creep = np.clip(t - CREEP_FROM, 0, None)
    loss += 0.0035 * creep  # +1.1 nats over the 320 steps to 780
    loss += np.where(t >= 780, 0.02 * (t - 780), 0.0)  # then the blow-up
    return loss * (1 + 0.05 * rng.standard_normal(STEPS))


@pytest.mark.parametrize("seed", range(3))
def test_a_slow_climb_is_dated_where_it_left_the_best_level(seed: int) -> None:
    lr = 1e-3 * 1.005 ** np.arange(STEPS)
    run = make_run({LOSS: _loss(seed), LEARNING_RATE: lr})
    divergence = next(f for f in build_case(run, []).findings if f.category == "loss_divergence")
    assert divergence.step is not None
    # the crossing of 1.5× the best (2.2) is near 780; the climb left the best level near 460
    assert CREEP_FROM <= divergence.step <= 700, divergence.step
