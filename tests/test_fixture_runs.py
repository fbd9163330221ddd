"""The issue's acceptance cases on real Trainer runs (fixtures/): planted causes and controls."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import tscope

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "trainer"
ALERTS = ("critical", "warning")


def manifest(name: str) -> dict:
    return json.loads((RUNS / name / "manifest.json").read_text())


@pytest.fixture(scope="module")
def cases(analyzed_trainer_run):
    return {
        name: analyzed_trainer_run(name)
        for name in (
            "stable",
            "stable_long_logging",
            "corrupted_batch",
            "lr_jump",
            "lr_blowup",
            "resumed_lr_restart",
        )
    }


@pytest.mark.parametrize("name", ["stable", "stable_long_logging"])
def test_stable_controls_raise_no_warning(cases, name):
    case = cases[name]
    assert [f.category for f in case.findings if f.severity in ALERTS] == []
    assert case.summary.status == "healthy"


def test_long_logging_window_is_stated(cases):
    kinds = {c.kind for c in cases["stable_long_logging"].caveats}
    assert "logging_window" in kinds


def test_corrupted_batch_step_is_the_biggest_loss_spike_and_a_bad_batch(cases):
    """6 of 24 rows of random tokens lift the loss 1.19× its local trend for one step, as a
    healthy control's natural batch can (+17–25%), so the loss spike's own impact grades it a
    note; what makes it a bad batch is that it stands out: 11.7 robust σ and 3.4× any other
    excursion of the run, with the gradient norm 3.4× its neighbours (bad_batch_logs)."""
    step = manifest("corrupted_batch")["planted"]["step"]
    case = cases["corrupted_batch"]
    loss_spikes = [s for s in case.spikes if s.metric == "train/loss"]
    assert max(loss_spikes, key=lambda s: s.magnitude).peak_step == step
    assert any(
        f.step == step and f.category == "loss_spike" and f.severity == "info"
        for f in case.findings
    )
    assert [(f.category, f.step, f.severity) for f in case.findings[:1]] == [
        ("bad_batch", step, "warning")
    ]
    assert case.summary.status == "incident"
    verdict = case.summary.verdict
    assert "most likely a bad batch" in verdict
    assert f"tscope replay --around {step}" in verdict


def test_lr_jump_is_in_the_top_three_at_the_jump_step(cases):
    step = manifest("lr_jump")["planted"]["step"]
    case = cases["lr_jump"]
    assert any(f.category == "lr_schedule_jump" and f.step == step for f in case.findings[:3])
    signals = [(e.signal, e.step) for e in case.story]
    assert signals[0] == ("learning_rate", step)


def test_lr_blowup_top_finding_is_divergence_with_lr_finding_and_early_warning(cases):
    case = cases["lr_blowup"]
    assert case.findings[0].category == "loss_divergence"
    assert "lr_too_high" in [f.category for f in case.findings if f.severity in ALERTS]
    # The hidden NaN (logged as a number by logging_nan_inf_filter) is found through grad_norm.
    assert any(f.category == "nan_loss" for f in case.findings)
    divergence_step = case.findings[0].step
    story_steps = [e for e in case.story if e.spike_id is None]
    assert any(
        e.signal in ("grad_norm", "loss_drift") and e.step < divergence_step for e in story_steps
    )


def test_resume_with_missing_scheduler_is_flagged_at_the_resume(cases):
    case = cases["resumed_lr_restart"]
    resume = next(f for f in case.findings if f.category == "resume_discontinuity")
    assert resume.severity == "warning" and resume.step == 121
    # The checkpoints show why: the resumed run restarted Adam (scheduler.pt missing → the
    # Trainer loads neither scheduler nor optimizer), and the checkpoint lacked the scheduler.
    assert case.findings[0].category == "optimizer_state_reset"
    incomplete = next(f for f in case.findings if f.category == "checkpoint_incomplete")
    assert incomplete.severity == "warning" and incomplete.step == 120
    assert len([e for e in case.events if e.kind == "resume"]) == 1


def test_damaged_files_give_a_partial_case(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUNS / "lr_jump", run)
    state = run / "checkpoint-240" / "trainer_state.json"
    state.write_bytes(state.read_bytes()[: len(state.read_bytes()) // 2])  # truncated JSON
    events = next((run / "runs").glob("events.out.tfevents.*"))
    events.write_bytes(events.read_bytes()[:-7])  # a live run's cut last record
    (run / "garbage.csv").write_bytes(b"\x00\x01\x02 not a table")
    case = tscope.analyze(run)
    damaged = {p.path for p in case.partial}
    assert "checkpoint-240/trainer_state.json" in damaged
    assert any(path.startswith("runs/events.out.tfevents") for path in damaged)
    # The rest is still analyzed: the older checkpoint's trainer_state and the TB events.
    assert any(f.category == "lr_schedule_jump" for f in case.findings)
    assert case.summary.partial is True


def test_inputs_are_never_written(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUNS / "corrupted_batch", run)
    before = {p: p.stat().st_mtime_ns for p in run.rglob("*")}
    tscope.render_case(tscope.analyze(run), tmp_path / "case")
    assert {p: p.stat().st_mtime_ns for p in run.rglob("*")} == before
