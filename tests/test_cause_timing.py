"""When a cause is "timed" for an incident: an LR change or a resume may act up to
CAUSE_LOOKBACK_STEPS before the onset, a bad batch only at its own step (ONE_STEP_CAUSE_LOOKBACK).
Measured case: holdout3's trainer_llama-resume_scheduler_lost-60, where an unplanted one-step
break at 75 took the card for a gradient-norm incident at 127 from the resume at 101."""

from __future__ import annotations

from synthetic import stable_run

from tscope.analyzers.base import Evidence
from tscope.analyzers.causes import RESUME, compete
from tscope.analyzers.impact import measure_impact
from tscope.analyzers.incidents import Incident
from tscope.analyzers.reach import CAUSE_LOOKBACK_STEPS
from tscope.model import Finding
from tscope.model.metric_names import GRAD_NORM


def finding(category: str, step: int) -> Finding:
    return Finding(
        category=category,
        severity="warning",
        confidence=0.9,
        step=step,
        layer=None,
        message=f"{category} at {step}",
        evidence={},
        suggestion="",
        source="logs",
    )


def verdict_for(bad_batch_step: int, resume_step: int, onset: int):  # type: ignore[no-untyped-def]
    run = stable_run()
    incident = Incident(
        "spike", GRAD_NORM, onset, onset + 1, onset + 3, measure_impact(run, onset, onset + 3)
    )
    resume, bad_batch = finding(RESUME, resume_step), finding("bad_batch", bad_batch_step)
    return compete(Evidence(run), resume, incident, [resume, bad_batch])


def test_a_bad_batch_long_before_the_onset_does_not_explain_it_and_the_resume_does():
    verdict = verdict_for(bad_batch_step=75, resume_step=101, onset=127)
    assert verdict.winner is not None and verdict.winner.category == RESUME
    bad_batch = next(
        c for c in verdict.candidates if c.finding is not None and c.category == "bad_batch"
    )
    assert not bad_batch.timed
    assert (
        CAUSE_LOOKBACK_STEPS >= 127 - 75
    )  # inside the LR/resume window: the bound is the bad batch's


def test_a_bad_batch_at_the_onset_is_still_timed():
    verdict = verdict_for(bad_batch_step=126, resume_step=101, onset=127)
    bad_batch = next(
        c for c in verdict.candidates if c.finding is not None and c.category == "bad_batch"
    )
    assert bad_batch.timed
