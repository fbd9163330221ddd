"""A multiplier that the schedule's decay cancels still shows in the LR: it climbs back from the
middle of the decay (holdout9, scored once and now spent).

trainer_llama-lr_ramp-46, a Trainer Llama run (linear decay after a 20-step warm-up, 110 steps)
with the LR multiplied ×1.049 per step from step 59: the decay held the product under the
warm-up's peak (up to 1.08× it, never the 1.25× the climb-past reading asks), the loss kept
falling, and the case said healthy. Read from the Trainer's own trainer_state.json (recorded by
fixtures/copy_bench_logs.py), the ramp is now the headline at its first raised step. The
legitimate schedules that climb again (cycles, restarts with a warm-up, cosine past its T_max,
a resumed run's re-warm-up) stay silent: tests/test_lr_ramp_after_linear_warmup.py.
"""

from __future__ import annotations

from recorded_logs import recorded_log

import tscope

LOG = recorded_log("trainer_llama-lr_ramp-46")  # fixtures/copy_bench_logs.py
PLANTED_STEP = 59


def test_a_ramp_the_decay_cancels_is_headlined_at_its_start() -> None:
    case = tscope.analyze(LOG)
    ramps = [f for f in case.findings if f.category == "lr_ramp"]
    assert len(ramps) == 1
    ramp = ramps[0]
    assert ramp.severity == "warning" and ramp.step == PLANTED_STEP
    assert ramp.evidence["past_peak"] is False
    assert ramp.evidence["factor_over_peak"] < 1.25  # the climb-past reading could not see it
    assert ramp.evidence["top_lr"] / ramp.evidence["ramp_low_lr"] >= 1.5
    assert "climbed back in the middle of its decay" in ramp.message
    assert "has not reacted" in ramp.message  # the loss kept falling: said, not hidden
    card = case.summary.card
    assert card is not None and card.cause.category == "lr_ramp" and card.step == PLANTED_STEP
