"""A healthy run's fast first descent is not repeated data (bench/ood's second block, ood42).

A Lightning run with `accumulate_grad_batches=4` (batch 4, a 10-step warm-up to 3.6e-3, cosine
over 140 steps, CSVLogger) logged a loss that fell steadily right after its warm-up: steps 20–29,
two steps apart, fell at six points in a row, 0.10× as rough as the steps before, down to 0.77×
their median. `repeated_data` read it as two batches fed again (warning, confidence 0.93): its
"deep" reading (a fall ≥ 10% under the level before allows a rougher stretch) took the median of
steps 0–19, the untrained start and its descent, as the level. The rule now asks that level to be
one: the later half of those points must not sit the deep margin under the earlier half.
"""

from __future__ import annotations

import numpy as np

from tscope.analyzers.explainers.repeated_data import repetitions

# train_loss of ood42-lt-accum4-lightning-control (metrics.csv, steps 0–139, 4 digits).
OOD42_LOSS = [
    4.5625, 4.5741, 4.5331, 4.4374, 4.3688, 4.2824, 4.2350, 4.1100, 4.0282, 3.9686,
    3.8669, 3.6927, 3.6166, 3.4089, 3.4301, 3.3409, 3.3786, 3.2004, 3.5804, 3.2818,
    3.3265, 3.3625, 3.2483, 3.2330, 3.1671, 3.1653, 3.0937, 3.0871, 3.0055, 3.0538,
    3.4125, 3.1298, 3.1126, 3.1201, 3.1918, 2.9673, 3.0078, 3.1594, 3.1598, 3.1096,
    2.9635, 3.0754, 3.1703, 3.0922, 3.2194, 3.1363, 2.9685, 3.0340, 2.9982, 2.9398,
    2.9830, 2.9924, 3.2355, 3.0967, 2.9879, 3.0137, 2.9902, 2.6922, 3.0915, 2.8253,
    2.8140, 2.9002, 2.9586, 2.8265, 2.9304, 2.8665, 2.8783, 2.7960, 2.9273, 2.9278,
    2.8307, 2.9429, 2.7949, 2.7011, 2.8471, 3.0040, 2.8327, 3.1003, 2.7125, 2.8079,
    2.7834, 2.8834, 2.7862, 2.9426, 2.8407, 2.8292, 2.8109, 2.8129, 2.9695, 2.9634,
    2.7728, 2.9692, 2.8913, 2.8059, 2.7311, 2.7133, 2.7841, 2.9291, 2.8627, 2.9295,
    2.9726, 2.7738, 2.9195, 2.8033, 3.1714, 2.8056, 2.8676, 2.8546, 2.6939, 2.7828,
    2.7525, 2.7713, 2.8587, 2.7273, 2.7427, 3.0239, 2.7863, 3.0104, 2.6159, 2.6859,
    2.6900, 2.4996, 2.7164, 2.7753, 2.8663, 2.6791, 2.7786, 2.8529, 2.9882, 2.8089,
    2.9603, 2.6045, 2.6665, 2.8012, 2.8320, 3.1710, 2.9928, 2.7375, 2.7580, 2.5764,
]  # fmt: skip


def test_the_descent_after_warmup_is_not_two_batches_repeated() -> None:
    values = np.array(OOD42_LOSS)
    assert repetitions(np.arange(values.size), values) == []


def test_a_deep_smooth_fall_after_a_level_is_still_repeated_data() -> None:
    # Two batches fed in turn after 40 points of fresh noise (σ 0.08) around a flat 3.4: each
    # falls a little less at every pass (d2 0.01, ~0.06σ: rougher than MAX_SMOOTHNESS, so only
    # the deep reading finds it) to 0.89× the level. The level before is one, so it stands.
    rng = np.random.default_rng(0)
    level = 3.4 + 0.08 * rng.standard_normal(40)
    passes = np.arange(6)
    first_batch = 3.35 - 0.1 * passes + 0.005 * passes**2
    stretch = np.column_stack([first_batch, first_batch + 0.05]).ravel()  # A, B, A, B, ...
    tail = 3.3 + 0.08 * rng.standard_normal(20)
    values = np.concatenate([level, stretch, tail])
    found = repetitions(np.arange(values.size), values)
    assert [r.period for r in found] == [2]
    assert 38 <= found[0].first_step <= 40  # chance repeat-like points may extend its start
    assert found[0].lowest <= 0.9 * found[0].level_before
