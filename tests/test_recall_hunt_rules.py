"""Rules corrected after a helper planted causes in setups the benchmark lacks (session 24).

- A warm-up of 2 steps (0, 0.01, 0.02) to a far too high LR is no warm-up: a Trainer run that
  fell fast and stalled at 2e-2 was healthy, since the rule asked for the peak at the first step.
- A loss that blows up far past the untrained level (2.6 -> 132, first logged loss 5.73) is a
  blow-up, not "back at the run's first logged loss (132): as if the weights were lost"; the
  message printed the peak as the first loss.
- A sustained gradient-norm rise dated "from about step 181" for a jump at 200: the first window
  whose median is above, not the first point above.
"""

from __future__ import annotations

import numpy as np

from tests.synthetic import make_run
from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.grad_norm import GradNormExplainer
from tscope.analyzers.explainers.warmup_stall import WarmupStallExplainer
from tscope.analyzers.impact import back_at_initial
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE, LOSS


def _stalled_loss(steps: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    drop = 3.2 + 2.3 * np.exp(-np.arange(steps) / 6.0)  # 5.5 -> 3.2 within ~20 steps
    return drop - 0.0005 * np.arange(steps) + 0.03 * rng.standard_normal(steps)


def _warmup(steps: int, warmup: int, peak: float) -> np.ndarray:
    return peak * np.minimum(np.arange(steps) / max(warmup, 1), 1.0)


def test_a_two_step_warm_up_to_a_far_too_high_lr_is_no_warm_up() -> None:
    for seed in range(3):
        run = make_run(
            {LOSS: _stalled_loss(200, seed), LEARNING_RATE: _warmup(200, 2, 2e-2)}, first_step=1
        )
        (finding,) = WarmupStallExplainer().run(Evidence(run))
        assert finding.category == "warmup_too_short"
        assert "no real warm-up" in finding.message and "by step 3" in finding.message
        # Dated where the cause acts (the peak LR), the stall named in the message.
        assert finding.step == 3 < finding.evidence["stall_step"]


def test_a_warm_up_of_ten_steps_keeps_the_rule_out() -> None:
    run = make_run({LOSS: _stalled_loss(200, 0), LEARNING_RATE: _warmup(200, 10, 2e-2)})
    assert WarmupStallExplainer().run(Evidence(run)) == []


def test_a_blow_up_far_past_the_untrained_level_is_not_lost_weights() -> None:
    initial, level = 5.73, 2.6
    assert back_at_initial(initial, level, np.array([5.6, 5.5, 5.2, 4.9]))
    assert not back_at_initial(initial, level, np.array([6.0, 30.0, 132.0, 120.0]))


def test_a_sustained_gradient_norm_rise_is_dated_at_its_first_raised_point() -> None:
    rng = np.random.default_rng(0)
    grads = 0.4 + 0.02 * rng.standard_normal(400)
    grads[200:] = 10.0 + rng.standard_normal(200)
    run = make_run({LOSS: np.linspace(4, 2, 400), GRAD_NORM: grads}, first_step=1)
    (finding,) = GradNormExplainer().run(Evidence(run))
    assert finding.step == 201  # the point at index 200, logged as step 201
