"""A one-step break that stands out only a little over the run's other excursions is a weaker
bad-batch reading, and says so (holdout11, scored once and now spent).

trainer_gpt2-control-37, a healthy Trainer GPT-2 run (sequential data, a constant 1.9e-3 after a
10-step warm-up, 100 steps, nothing planted), breaks at step 42: the loss 1.2× its trend
(7.4 robust σ) with the gradient norm 4× its neighbours, back the next step, 1.71× the run's next
excursion, just over the rule's 1.7 (bad_batch_logs.DOMINANCE_WITH_GRADIENT). On dev and
holdout7–11 every bad_batch finding not at a planted bad batch stood out under 2× that bound,
as did 5 of the 30 planted ones; the finding there now states the near band's own prior and
the reason, and the calibration table its measured right-rate.
"""

from __future__ import annotations

from recorded_logs import recorded_log

import tscope
from tscope.analyzers.explainers.bad_batch_logs import (
    DOMINANCE_WITH_GRADIENT,
    LOGS_CONFIDENCE,
    NEAR_CONFIDENCE,
    NEAR_DOMINANCE_FACTOR,
)

LOG = recorded_log("trainer_gpt2-control-37")  # fixtures/copy_bench_logs.py


def test_a_break_near_the_dominance_bound_is_a_weaker_reading() -> None:
    case = tscope.analyze(LOG)
    found = [f for f in case.findings if f.category == "bad_batch"]
    assert len(found) == 1 and found[0].step == 42
    finding = found[0]
    dominance = finding.evidence["dominance"]
    assert DOMINANCE_WITH_GRADIENT <= dominance < NEAR_DOMINANCE_FACTOR * DOMINANCE_WITH_GRADIENT
    assert finding.evidence["near_dominance_bound"] is True
    assert finding.rule_confidence == NEAR_CONFIDENCE < LOGS_CONFIDENCE
    assert "a weaker reading" in finding.message
    # the verdict states no more than the finding does (calibration.calibrated_confidence)
    card = case.summary.card
    assert card is not None and card.cause.confidence <= finding.confidence
