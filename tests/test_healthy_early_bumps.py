"""Healthy benchmark controls that warned (issue 11's false-alarm target: ≤ 1 per 100 healthy
runs), read from their recorded logs (fixtures/copy_bench_logs.py; spent held-out splits).

- lightning-control-15 (holdout15; a real Lightning run, 20-step warm-up to 3.5e-3, cosine,
  180 steps): the loss goes 3.43 -> 5.96 at step 26 with the gradient norm 10× its neighbours and
  is back within 3 points. Right after the warm-up healthy runs make such excursions (863 runs'
  natural early bumps reach 2.03×, impact.EARLY_TRANSIENT_MAX_RATIO); it was a loss-spike and a
  gradient-norm-spike warning at 1.74×.
- trainer_gpt2-control-89 (holdout8; Trainer GPT-2, constant LR 2.3e-3, the corpus streamed in
  order): the loss drifts up 1.10× over 30 steps while the gradient norm wanders to 4.7×. As a
  loss bump it is the data's (the LR held steady, no resume: spike_judgement.optimizer_ruled_out);
  the gradient-norm spike's "the loss reacted" now reads it by the same rule.
"""

from __future__ import annotations

from recorded_logs import BENCH_LOGS, recorded_log

import tscope

ALERTS = ("warning", "critical")


def test_a_short_bump_right_after_the_warm_up_is_a_note() -> None:
    case = tscope.analyze(BENCH_LOGS / "lightning-control-15")  # a Lightning event file
    assert [f for f in case.findings if f.severity in ALERTS] == []
    bump = next(f for f in case.findings if f.category == "loss_spike" and f.step == 26)
    assert bump.severity == "info"
    impact = bump.evidence["impact"]
    assert impact["early_phase"] is True and impact["recovered"] is True
    assert 1.5 < impact["ratio"] < 2.0
    gradient = next(f for f in case.findings if f.category == "grad_norm_spike" and f.step == 27)
    assert gradient.severity == "info"
    assert "in the early phase" in case.summary.verdict


def test_a_data_drift_at_a_steady_lr_does_not_make_a_gradient_spike_a_warning() -> None:
    case = tscope.analyze(recorded_log("trainer_gpt2-control-89"))
    assert [f for f in case.findings if f.severity in ALERTS] == []
    gradient = next(f for f in case.findings if f.category == "grad_norm_spike" and f.step == 139)
    assert gradient.severity == "info"
