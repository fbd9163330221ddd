"""lr_too_high, the stalled kind (analyzers/explainers/peak_stall.py): a warm-up to a peak above
the typical range, held, and a loss that stops improving there. A blind set's plain loop, session
27: warmed up to 0.04 by step 150, loss 3.2 -> 2.61 during the warm-up and 2.62 at step 850."""

from __future__ import annotations

import numpy as np
import pytest
from synthetic import make_run

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.peak_stall import PeakStallExplainer
from tscope.model.metric_names import LEARNING_RATE, LOSS

STEPS = 900
WARMUP = 150


def _run(peak: float, keeps_falling: bool, jump: bool = False, seed: int = 0):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    t = np.arange(STEPS, dtype=float)
    lr = peak * np.minimum((t + 1) / WARMUP, 1.0)
    if jump:
        lr = np.where(t < WARMUP, peak / 20 * np.minimum((t + 1) / 30, 1.0), peak)
    stalled = np.where(t < WARMUP, 5.5 - 2.9 * t / WARMUP, 2.6)
    falling = 2.0 + 3.5 * np.exp(-t / 200)
    loss = (falling if keeps_falling else stalled) * (1 + 0.02 * rng.standard_normal(STEPS))
    return make_run({LOSS: loss, LEARNING_RATE: lr}, first_step=0)


@pytest.mark.parametrize("seed", range(3))
def test_a_loss_that_stops_at_a_too_high_warmed_up_peak_is_lr_too_high(seed: int) -> None:
    (finding,) = PeakStallExplainer().run(Evidence(_run(0.04, keeps_falling=False, seed=seed)))
    assert finding.category == "lr_too_high" and finding.severity == "warning"
    assert abs(finding.evidence["peak_step"] - (WARMUP - 1)) <= 2


@pytest.mark.parametrize(
    ("peak", "keeps_falling", "jump"),
    [
        (3e-3, False, False),  # a typical peak: a stall there is another rule's question
        (0.04, True, False),  # it kept learning at its peak
        (0.04, False, True),  # the LR jumped to its peak: lr_schedule_jump's
    ],
)
def test_no_finding_without_every_condition(peak: float, keeps_falling: bool, jump: bool) -> None:
    assert PeakStallExplainer().run(Evidence(_run(peak, keeps_falling, jump))) == []
