"""How `tscope replay` reads its what-ifs on a persistent LR jump, as a new user met it.

trainer_gpt2-lr_jump_persistent-15 (the benchmark's holdout15, a real Trainer GPT-2 run; its log
recorded by fixtures/copy_bench_logs.py): the LR jumps ×44.6 at step 62 and stays; the loss goes
3.21 → 3.54 → 4.43 → 4.08 → 3.52 → 3.97 → 3.71 over steps 62–68, a 9.9 robust σ loss spike for
the log's detectors. The replay reproduced the log, yet both what-ifs read "no spike to remove":
the spike line came from the 20 noisy losses before the window (3.21 + 6 × 0.229 ≈ 4.58, above
the 4.43 peak). And with the line right, lowering the LR removed all of the spike while skipping
the jump's first update removed 68% (the raised LR did the rest), which read "do not single out
data or state". The detectors' own reference now sets the line when it is lower, and a smaller
step that removes all of a spike the batch explains only in part points at the state.
"""

from __future__ import annotations

import json

from recorded_logs import recorded_log

from tscope.analyzers.replay import cause_verdict, spike_line
from tscope.analyzers.signals import loss_series
from tscope.model.replay import InterventionOutcome
from tscope.pipeline import analyze_run

LOG = recorded_log("trainer_gpt2-lr_jump_persistent-15")  # fixtures/copy_bench_logs.py
JUMP_STEP = 62


def _logged_peak(first: int, last: int) -> float:
    rows = json.loads(LOG.read_text(encoding="utf-8"))["log_history"]
    return max(r["loss"] for r in rows if "loss" in r and first <= r["step"] <= last)


def test_the_spike_line_lets_a_spike_the_detectors_found_be_removed() -> None:
    _, run = analyze_run(str(LOG))
    logged = loss_series(run, "train/loss")
    # A window starting at the jump, right after checkpoint-60: the replay has no steps before
    # it, so the reference is the logged history.
    reference = spike_line([], JUMP_STEP - 1, logged)
    assert reference is not None
    level, line = reference
    peak = _logged_peak(JUMP_STEP - 1, JUMP_STEP + 6)
    assert peak > line > level  # a spike to remove, as the detectors said
    spike = next(f for f in analyze_run(str(LOG))[0].findings if f.category == "loss_spike")
    assert spike.evidence["robust_z_score"] >= 6


def _outcome(name: str, effect: str) -> InterventionOutcome:
    return InterventionOutcome(name, {}, 0.0, effect == "removed", effect=effect)


def test_a_smaller_step_removing_what_the_batch_explains_in_part_points_at_the_state() -> None:
    assert cause_verdict([_outcome("skip", "partial"), _outcome("lr", "removed")]) == "state"
    assert cause_verdict([_outcome("skip", "kept"), _outcome("lr", "removed")]) == "state"
    # The batch alone removing it is the data's; a partial reading alone decides nothing.
    assert cause_verdict([_outcome("skip", "removed"), _outcome("lr", "kept")]) == "data"
    assert cause_verdict([_outcome("skip", "partial")]) is None
    assert cause_verdict([_outcome("skip", "partial"), _outcome("lr", "partial")]) is None
