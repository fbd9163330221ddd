"""Explainers on planted causes, and stable controls where nothing may warn."""

from __future__ import annotations

import numpy as np
import pytest

from tests.synthetic import (
    bad_batch_run,
    fp16_collapse_run,
    loss_curve,
    lr_blowup_run,
    lr_jump_run,
    make_run,
    stable_run,
    warmup_cosine,
)
from tscope.model import RunEvent
from tscope.model.metric_names import LEARNING_RATE, LOSS
from tscope.pipeline import build_case


def categories(case, severities=("critical", "warning")):
    return [f.category for f in case.findings if f.severity in severities]


@pytest.mark.parametrize("seed", range(6))
def test_stable_control_raises_no_warning(seed):
    case = build_case(stable_run(seed=seed), [])
    assert categories(case) == []
    assert case.summary.status == "healthy"


@pytest.mark.parametrize("seed", range(3))
def test_bad_batch_is_the_biggest_spike_with_a_finding_at_its_step(seed):
    case = build_case(bad_batch_run(seed=seed, at=250), [])
    top = case.findings[0]
    # The one-step break with the gradient norm ×4 in the same step is read as its cause from the
    # logs (analyzers/explainers/bad_batch_logs.py), ranked above the spike it explains.
    assert top.category == "bad_batch" and top.step == 250 and top.severity == "warning"
    assert any(
        f.category == "loss_spike" and f.step == 250 and f.severity == "warning"
        for f in case.findings
    )
    assert max(case.spikes, key=lambda s: s.magnitude).peak_step == 250
    assert "bad batch" in case.summary.verdict
    assert {a.category for a in case.alternatives} >= {"lr_schedule_jump", "loss_divergence"}


@pytest.mark.parametrize("factor", [5.0, 20.0])
def test_lr_jump_is_ranked_first_at_the_jump_step(factor):
    case = build_case(lr_jump_run(at=240, factor=factor), [])
    top_three = case.findings[:3]
    assert any(f.category == "lr_schedule_jump" and f.step == 240 for f in top_three)
    assert case.findings[0].category == "lr_schedule_jump"
    signals = [event.signal for event in case.story]
    assert signals.index("learning_rate") < signals.index("loss")


def test_lr_blowup_top_finding_is_divergence_with_lr_finding_and_early_warning():
    case = build_case(lr_blowup_run(), [])
    assert case.findings[0].category in ("loss_divergence", "nan_loss")
    assert "loss_divergence" in categories(case)
    assert "lr_too_high" in categories(case)
    story = case.story
    first_loss = min(e.step for e in story if e.signal == "loss")
    assert any(e.signal == "grad_norm" and e.step < first_loss for e in story)


def test_warmup_end_and_cosine_decay_are_not_jumps():
    case = build_case(stable_run(), [])
    assert "lr_schedule_jump" not in [f.category for f in case.findings]


def test_step_decay_is_info_not_warning():
    steps = 400
    lr = np.full(steps, 3e-4)
    lr[300:] = 3e-5
    case = build_case(make_run({LOSS: loss_curve(steps, 0), LEARNING_RATE: lr}), [])
    jumps = [f for f in case.findings if f.category == "lr_schedule_jump"]
    assert [(f.step, f.severity) for f in jumps] == [(301, "info")]


def test_fp16_loss_scale_collapse():
    case = build_case(fp16_collapse_run(), [])
    finding = next(f for f in case.findings if f.category == "loss_scale_collapse")
    assert finding.severity == "warning" and finding.evidence["consecutive_reductions"] >= 5
    # Dated where the scale began to fall (index 300 is step 301), not where the streak ended.
    assert finding.step == finding.evidence["began_step"] == 301


def test_resume_with_lr_restart_is_flagged_at_the_resume():
    steps = 300
    lr = warmup_cosine(steps)
    lr[200:] = warmup_cosine(100, warmup=20)  # scheduler restarted from warm-up after the resume
    run = make_run(
        {LOSS: loss_curve(steps, 1), LEARNING_RATE: lr},
        events=[RunEvent("resume", 201, "steps go back from 240 to 201", "synthetic.jsonl")],
    )
    case = build_case(run, [])
    finding = next(f for f in case.findings if f.category == "resume_discontinuity")
    assert finding.severity == "warning" and finding.step == 201
    assert "learning rate" in finding.message


def test_benign_resume_is_info():
    run = make_run(
        {LOSS: loss_curve(300, 2), LEARNING_RATE: warmup_cosine(300)},
        events=[RunEvent("resume", 150, "new log file", "synthetic.jsonl")],
    )
    case = build_case(run, [])
    assert [(f.category, f.severity) for f in case.findings] == [("resume_discontinuity", "info")]


def test_nan_loss_is_critical():
    loss = loss_curve(200, 3)
    loss[150] = np.nan
    case = build_case(make_run({LOSS: loss}), [])
    assert case.findings[0].category == "nan_loss" and case.findings[0].step == 151  # index 150


def test_eval_divergence():
    eval_loss = np.array([3.0, 2.6, 2.4, 2.3, 2.35, 2.7, 2.9])
    run = make_run({LOSS: loss_curve(7, 0), "eval/loss": eval_loss})
    case = build_case(run, [])
    assert "eval_divergence" in categories(case)


def test_case_json_is_deterministic():
    first = build_case(lr_jump_run(), []).to_dict()
    second = build_case(lr_jump_run(), []).to_dict()
    assert first == second
    assert [f["id"] for f in first["findings"]] == [
        f"F{i}" for i in range(1, len(first["findings"]) + 1)
    ]


def test_lr_jump_after_warmup_is_not_a_long_warmup():
    """A ×20 jump at step 240 must not read as a 240-step warm-up ending there."""
    case = build_case(lr_jump_run(at=240, factor=20.0), [])
    warmups = [f for f in case.findings if f.category == "warmup_too_short"]
    assert all(f.evidence["warmup_steps"] < 30 for f in warmups)


def test_a_grad_norm_spike_while_the_loss_is_nan_counts_as_the_loss_reacting():
    """Regression: an all-NaN loss window during a grad-norm spike raised a NumPy warning."""
    import warnings

    from tscope.analyzers.spike_judgement import loss_reacts as _loss_reacts
    from tscope.model import Spike
    from tscope.model.metric_names import GRAD_NORM

    loss = np.linspace(4.0, 3.0, 60)
    loss[40:] = np.nan
    run = make_run({LOSS: loss, GRAD_NORM: np.ones(60)})
    spike = Spike("S1", GRAD_NORM, 41, 43, None, 50.0, ("robust_z",), 1.0, 50.0)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert _loss_reacts(run, spike, [spike])
