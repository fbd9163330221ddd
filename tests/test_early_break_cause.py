"""A one-step break early in a run is not named a bad batch by elimination (holdout7, scored once
and now spent).

trainer_llama-control-82, a healthy Trainer Llama run (a 20-step warm-up to 3.3e-3, 170 steps,
nothing planted), breaks at step 42: the loss 3.21 -> 3.60 -> 4.92 -> 3.96 with the gradient norm
36× its neighbours. The bad-batch rule leaves the first 30% of a run alone (healthy runs break
like this right after the warm-up, one_step_breaks.EARLY_FRACTION), yet the cause competition
named "a bad batch (confidence 0.96)" by ruling out the LR and a resume. The cause is now
undetermined, and the verdict says why and that a replay would decide. A bad batch planted later
in a run is still named (tests/test_bad_batch_producers.py and the benchmark).
"""

from __future__ import annotations

from recorded_logs import recorded_log

import tscope

LOG = recorded_log("trainer_llama-control-82")  # fixtures/copy_bench_logs.py
STEPS = 170


def test_an_early_natural_break_is_not_blamed_on_the_batch() -> None:
    case = tscope.analyze(LOG)
    card = case.summary.card
    assert card is not None and card.step == 42
    assert card.step < 0.3 * STEPS  # the early phase the bad-batch rule leaves alone
    assert card.cause.category == "undetermined"
    assert "bad batch (" not in case.summary.verdict
    assert f"tscope replay --around {card.step}" in case.summary.verdict
    assert not any(f.category == "bad_batch" for f in case.findings)
