"""Two batches fed in turn that the model does not memorise are repeated data too.

bench holdout5 trainer_gpt2-repeated_data-71 (Trainer GPT-2, linear decay from 3.8e-3, the calls
of step 57 and 58 fed again in turn for 40 steps): one of the two batches scored 3.097, 3.098,
3.102, 3.107, … every second step, without the falling drop `repeated_data` asked, so every
repeat-like stretch broke after 2–6 points and the run was called healthy. The periodic reading
(`PERIODIC_FRACTION`): the loss 2 steps apart stays within a fifth of the run's p-step spread of
itself, point after point. A logger repeating a stale number (exactly equal values) and fresh
noise do not read that way.
"""

from __future__ import annotations

import numpy as np

from tscope.analyzers.explainers.repeated_data import repetitions

# train/loss of holdout5 trainer_gpt2-repeated_data-71 (trainer_state.json, steps 1–100).
LOSS = [
    4.4822, 4.4747, 4.4543, 4.3914, 4.3426, 4.2845, 4.2090, 4.1689, 4.0375, 3.9943, 3.8860, 3.7643,
    3.7027, 3.6172, 3.6076, 3.4443, 3.4012, 3.3812, 3.5025, 3.2486, 3.2611, 3.2013, 3.2102, 3.2394,
    3.1816, 3.1771, 3.2129, 3.1749, 3.0048, 3.2855, 3.1636, 3.1251, 3.3454, 3.2199, 3.1878, 3.2553,
    3.3367, 3.1104, 3.1290, 3.2098, 3.2683, 3.0777, 3.2037, 3.2642, 3.0302, 3.1725, 3.0557, 3.1218,
    3.1297, 3.2025, 3.1666, 3.1285, 3.0985, 3.3248, 3.1989, 3.2234, 3.0970, 3.3826, 3.0970, 3.3639,
    3.0984, 3.3433, 3.1021, 3.3242, 3.1068, 3.3078, 3.1091, 3.2928, 3.1066, 3.2743, 3.1053, 3.2665,
    3.0895, 3.2814, 3.0862, 3.2806, 3.0848, 3.2750, 3.0843, 3.2660, 3.0844, 3.2547, 3.0851, 3.2413,
    3.0862, 3.2263, 3.0869, 3.2110, 3.0853, 3.2016, 3.0785, 3.2006, 3.0683, 3.1946, 3.0617, 3.1931,
    3.2090, 3.2762, 3.1385, 3.1446,
]  # fmt: skip
PLANTED_STEP, LENGTH = 57, 40


def test_two_batches_that_score_the_same_each_time_are_found() -> None:
    values = np.array(LOSS)
    (found,) = repetitions(np.arange(1, values.size + 1), values)
    assert found.periodic and found.period == 2
    assert PLANTED_STEP - 1 <= found.first_step <= PLANTED_STEP + LENGTH
    assert found.last_step <= PLANTED_STEP + LENGTH
    assert found.largest_drop < 0.5 * found.noise_before  # far inside the fresh spread


def test_a_stale_logged_value_is_not_a_repetition() -> None:
    values = np.array(LOSS)
    values[60:80] = values[60]  # a logger that kept printing its last value
    found = repetitions(np.arange(1, values.size + 1), values)
    assert not any(r.periodic and r.first_step >= 60 for r in found)


def test_fresh_noise_has_no_periodic_reading() -> None:
    for seed in range(20):
        rng = np.random.default_rng(seed)
        steps = np.arange(1, 401)
        values = 3.0 + 1.5 * np.exp(-steps / 40) + 0.05 * rng.standard_normal(steps.size)
        assert repetitions(steps, values) == [], seed
