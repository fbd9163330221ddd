"""A bad batch in the first 30% of a long run is named (tests/data/long_run_bad_batch/,
fixtures/make_long_run_logs.py: a plain-torch loop's 1,200-step runs, a 20-step warm-up).

Healthy runs break for one step right after the warm-up, so one-step breaks in the early phase
are not named bad batches (early_phase.EARLY_FRACTION). That phase was the first 30% of the
logged points, measured on 100–200-step runs; here a batch of random characters at step 330
(loss 2.58 → 6.16, gradient norm ×15, back on trend the next step) is 310 steps past the warm-up
and was "undetermined". The phase now ends 4 warm-up lengths after the warm-up (at least 40 steps)
when that is sooner. The healthy twin stays healthy.
"""

from __future__ import annotations

from pathlib import Path

import tscope
from tscope.analyzers.early_phase import early_phase_end_step
from tscope.pipeline import analyze_run

FIXTURES = Path(__file__).resolve().parent / "data" / "long_run_bad_batch"
CORRUPTED_STEP = 330


def test_a_bad_batch_after_the_warm_ups_aftermath_is_named() -> None:
    case = tscope.analyze(FIXTURES / "bad_batch_330")
    card = case.summary.card
    assert card is not None
    assert card.cause.category == "bad_batch"
    assert card.step == CORRUPTED_STEP
    found = [f for f in case.findings if f.category == "bad_batch"]
    assert [f.step for f in found] == [CORRUPTED_STEP]
    assert found[0].evidence["grad_norm_corroborates"] is True


def test_the_early_phase_ends_after_the_warm_ups_aftermath() -> None:
    _, run = analyze_run(str(FIXTURES / "bad_batch_330"))
    # A 20-step warm-up: its end (step 20) plus max(4 × 20, 40) steps.
    assert early_phase_end_step(run) == 20 + 80


def test_the_healthy_twin_has_no_warning() -> None:
    case = tscope.analyze(FIXTURES / "healthy")
    assert case.summary.status == "healthy"
    assert not [f for f in case.findings if f.severity in ("warning", "critical")]
