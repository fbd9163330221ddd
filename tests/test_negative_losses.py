"""Losses that go below zero (a Gaussian NLL, a loss minus a constant): "more than 1.1× the best"
is a margin of 0.1·|best| above it, not 1.1 × best, which for a negative best lies below it and
called every later evaluation worse (a healthy-run hunt of session 25: a Lightning Gaussian NLL's
per-epoch val_loss)."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.baseline import ratio_above
from tscope.analyzers.explainers.divergence import _eval_divergence

# The run's val_loss per epoch, best -1.594 at the ninth, then within its own noise.
VAL_LOSS = [
    -0.447,
    -1.076,
    -1.065,
    -1.278,
    -1.359,
    -1.524,
    -1.280,
    -1.567,
    -1.594,
    -1.531,
    -1.470,
    -1.481,
]


def test_the_margin_is_measured_from_the_best_whatever_its_sign():
    assert not ratio_above(-1.50, -1.594, 1.1)
    assert ratio_above(-1.40, -1.594, 1.1)
    assert ratio_above(2.3, 2.0, 1.1) and not ratio_above(2.1, 2.0, 1.1)


def test_a_negative_eval_loss_within_its_noise_is_no_eval_divergence():
    steps = np.arange(1, len(VAL_LOSS) + 1) * 157
    assert _eval_divergence(steps, np.array(VAL_LOSS)) is None


def test_a_negative_eval_loss_that_really_rose_is_one():
    rose = [*VAL_LOSS[:9], -1.2, -1.1, -1.0]
    steps = np.arange(1, len(rose) + 1) * 157
    finding = _eval_divergence(steps, np.array(rose))
    assert finding is not None and finding.category == "eval_divergence"
