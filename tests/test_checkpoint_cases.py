"""Issue 3's acceptance cases: what checkpoints alone tell, on the real Trainer fixture runs."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import tscope

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "trainer"
ALERTS = ("critical", "warning")


def checkpoints_only(name: str, tmp_path: Path) -> Path:
    """A copy of the run without any log: no trainer_state.json, no TensorBoard events."""
    run = tmp_path / name
    shutil.copytree(RUNS / name, run)
    for state in run.rglob("trainer_state.json"):
        state.unlink()
    shutil.rmtree(run / "runs", ignore_errors=True)
    return run


def categories(case, source="checkpoints"):
    return [f.category for f in case.findings if f.source == source and f.severity in ALERTS]


def test_lr_jump_from_checkpoints_alone_is_update_ratio_high_in_that_window(tmp_path):
    case = tscope.analyze(checkpoints_only("lr_jump", tmp_path))
    assert case.metrics == []
    found = [f for f in case.findings if f.category == "update_ratio_high"]
    assert len(found) == 1 and found[0].evidence["window"] == [120, 180]  # LR ×50 at 150–154
    assert found[0].layer and found[0].evidence["tensors"]
    assert case.summary.status == "incident"


def test_resume_without_optimizer_state_is_optimizer_state_reset(tmp_path):
    case = tscope.analyze(checkpoints_only("resumed_lr_restart", tmp_path))
    reset = [f for f in case.findings if f.category == "optimizer_state_reset"]
    assert reset and reset[0].severity == "critical" and reset[0].evidence["adam_step"] < 180


@pytest.mark.parametrize("name", ["stable", "stable_long_logging", "corrupted_batch"])
def test_controls_raise_no_checkpoint_warning(name):
    case = tscope.analyze(RUNS / name)
    assert categories(case) == []


def test_nonfinite_weights_in_the_blown_up_run():
    case = tscope.analyze(RUNS / "lr_blowup")
    found = next(f for f in case.findings if f.category == "nonfinite_weights")
    assert found.step == 240 and found.severity == "critical"
    assert found.evidence["last_finite_checkpoint_step"] == 180


def test_case_lists_checkpoints_with_what_they_hold():
    case = tscope.analyze(RUNS / "resumed_lr_restart")
    by_step = {c.step: c for c in case.checkpoints}
    assert set(by_step) == {120, 180, 240}
    assert all(c.has_optimizer and c.has_rng and c.format for c in case.checkpoints)
    payload = case.to_dict()
    assert payload["layers"]["steps"] == [120, 180, 240]


def test_no_weights_flag_keeps_to_logs(tmp_path):
    case = tscope.analyze(RUNS / "lr_jump", read_weights=False)
    assert categories(case) == [] and case.layers is None and len(case.checkpoints) == 3


def test_persistent_lr_jump_from_checkpoints_alone_is_lr_schedule_jump(tmp_path):
    """Issue 11: LR ×15 from step 150 to the end; only the four checkpoints are given."""
    case = tscope.analyze(checkpoints_only("lr_jump_persistent", tmp_path))
    jumps = [f for f in case.findings if f.category == "lr_schedule_jump"]
    assert len(jumps) == 1 and jumps[0].severity == "warning"
    assert jumps[0].evidence["checkpoint_steps"] == [120, 180]
    assert jumps[0].evidence["factor"] == pytest.approx(15.0, rel=1e-6)
    assert jumps[0].evidence["stayed_raised_through"] == 240
    assert case.summary.headline_finding == jumps[0].id
    # Raw, the window after the jump moved far more; the LR the checkpoints hold accounts for it,
    # so it is context, not a second warning, and the window before the jump is not flagged.
    updates = [f for f in case.findings if f.category == "update_ratio_high"]
    assert [f.evidence["window"] for f in updates if f.severity in ALERTS] == []
    after = next(f for f in updates if f.evidence["window"] == [120, 180])
    assert after.evidence["median_factor_all_tensors"] >= 3.0 and after.evidence["explained_by_lr"]


def test_checkpoint_only_case_header_lists_the_checkpoint_steps(tmp_path):
    from tscope.render.view import build_view

    case = tscope.analyze(checkpoints_only("lr_jump_persistent", tmp_path))
    steps = build_view(case)["run"]["steps"]
    assert steps == "no logged steps; checkpoints at steps 60, 120, 180, 240"


def test_logged_lr_jump_is_not_reported_twice_from_checkpoints():
    case = tscope.analyze(RUNS / "lr_jump_persistent")
    jumps = [f for f in case.findings if f.category == "lr_schedule_jump"]
    assert [(f.source, f.step) for f in jumps] == [("logs", 150)]
