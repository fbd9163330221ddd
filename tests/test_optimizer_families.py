"""Healthy runs outside AdamW at one update per logged step (tests/data/optimizer_families/,
fixtures/make_optimizer_family_runs.py), and the optimizer states of every torch family.

Each run was a false alarm before (issue 11, helper-made healthy runs):
- a GradScaler started at 2^32 skips its first updates while it halves: Adam's counter trailed
  every checkpoint by the skips ("critical: optimizer state restarted") and the halvings read
  as a collapse (warning);
- accumulation over 4 micro-batches, logged and checkpointed by micro-batch: Adam's counter is
  a quarter of the step ("critical: restarted"), the LR a staircase (a jump per stair);
- Adagrad at 0.02 with no warm-up, its usual setting: "warmup_too_short" from AdamW's rules;
- Adafactor, Adagrad, RMSprop and SGD states were "optimizer moments missing" (a warning once
  the run resumed from one), plain SGD keeping no state at all.
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
import torch

import tscope
from tests.synthetic import make_run
from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.learning_rate import lr_jumps
from tscope.analyzers.explainers.optimizer_state import _resets
from tscope.analyzers.optimizer_family import optimizer_family
from tscope.analyzers.training_kind import training_kind
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.evidence import read_checkpoints
from tscope.ingest.checkpoints.optimizer_summary import summarize_optimizer
from tscope.model.metric_names import LOSS
from tscope.pipeline import analyze_run

RUNS = Path(__file__).resolve().parent / "data" / "optimizer_families"


def alerts(case: tscope.Case) -> list[str]:
    return [f"{f.severity}:{f.category}" for f in case.findings if f.severity != "info"]


def test_skipped_fp16_updates_are_no_optimizer_reset_and_the_start_is_calibration() -> None:
    case = tscope.analyze(RUNS / "fp16_start_2p32")
    assert alerts(case) == [] and case.summary.status == "healthy"
    (note,) = [f for f in case.findings if f.category == "loss_scale_collapse"]
    assert note.severity == "info" and "calibrating" in note.message
    assert note.evidence["calibration_halvings"] >= 5
    assert note.evidence["initial_loss_scale"] == 2.0**32


def _evidence(name: str) -> Evidence:
    run = analyze_run(RUNS / name).run
    checkpoints, _ = read_checkpoints(RUNS / name, LoadOptions())
    return Evidence(run, checkpoints=checkpoints)


def test_a_reset_is_still_found_past_the_skips() -> None:
    """The skips explain only their own count: a counter further behind is still a reset."""
    evidence = _evidence("fp16_start_2p32")
    assert evidence.checkpoints is not None and _resets(evidence) == []
    counters = [s.optimizer_step for s in evidence.checkpoints.snapshots]
    assert all(
        c is not None and c < s for c, s in zip(counters, evidence.checkpoints.steps, strict=True)
    )
    behind = tuple(replace(s, optimizer_step=10) for s in evidence.checkpoints.snapshots)
    moved = replace(evidence, checkpoints=replace(evidence.checkpoints, snapshots=behind))
    (finding,) = _resets(moved)
    assert finding.category == "optimizer_state_reset" and finding.severity == "critical"


def test_micro_batch_steps_are_no_reset_and_their_lr_stairs_no_jumps() -> None:
    case = tscope.analyze(RUNS / "accum4_microsteps")
    assert alerts(case) == [] and case.summary.status == "healthy"


def test_adagrad_without_warm_up_is_not_judged_by_adamw_rules() -> None:
    case = tscope.analyze(RUNS / "adagrad_no_warmup")
    assert alerts(case) == []
    assert optimizer_family(_evidence("adagrad_no_warmup")) == "adagrad"
    assert optimizer_family(_evidence("fp16_start_2p32")) == "adam"


def _state_after_two_steps(make: object) -> dict[str, object]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 3), torch.nn.Linear(3, 2))
    optimizer = make(model.parameters())  # type: ignore[operator]
    for _ in range(2):
        optimizer.zero_grad()
        model(torch.randn(5, 4)).square().sum().backward()
        optimizer.step()
    return optimizer.state_dict()


def _adafactor(params: object) -> torch.optim.Optimizer:
    from transformers.optimization import Adafactor

    return Adafactor(params, lr=1e-3, relative_step=False, scale_parameter=False)


OPTIMIZERS = {
    "adamw": lambda p: torch.optim.AdamW(p, lr=1e-3),
    "adagrad": lambda p: torch.optim.Adagrad(p, lr=1e-2),
    "rmsprop": lambda p: torch.optim.RMSprop(p, lr=1e-3),
    "sgd_momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9),
    "sgd_plain": lambda p: torch.optim.SGD(p, lr=0.1),
    "adafactor": _adafactor,
}


@pytest.mark.parametrize("name", sorted(OPTIMIZERS))
def test_every_family_state_is_complete(name: str) -> None:
    summary = summarize_optimizer(_state_after_two_steps(OPTIMIZERS[name]))
    assert summary.has_moments and summary.has_step_counters, summary.notes


def test_an_adam_state_saved_before_any_step_is_still_incomplete() -> None:
    model = torch.nn.Linear(4, 3)
    summary = summarize_optimizer(torch.optim.AdamW(model.parameters()).state_dict())
    assert not summary.has_moments


def test_stairs_are_judged_per_stair_and_a_jump_on_them_is_still_found() -> None:
    updates = np.arange(60)
    per_update = 1e-3 * np.minimum((updates + 1) / 20, 1.0)
    stairs = np.repeat(per_update, 4)
    steps = np.arange(stairs.size)
    assert lr_jumps(steps, stairs) == []
    jumped = stairs.copy()
    jumped[160:] *= 10  # a ×10 at update 40, held
    (jump,) = lr_jumps(steps, jumped)
    assert jump.step == 160 and jump.index == 160 and jump.factor == pytest.approx(10)
    # a constant LR that jumps once is two runs of equal values, not stairs
    constant = np.full(200, 1e-3)
    constant[120:] = 1e-2
    assert [j.step for j in lr_jumps(steps[:200], constant)] == [120]


def test_a_low_loss_logged_after_updates_does_not_make_the_run_a_fine_tune() -> None:
    """A byte-level model from scratch is at ~3 nats (its unigram level) ten steps in."""
    later = make_run({LOSS: np.array([3.03, 3.0, 2.98])}, first_step=9)
    assert training_kind(later) is None
    first = make_run({LOSS: np.array([1.2, 1.1, 1.0])}, first_step=1)
    kind = training_kind(first)
    assert kind is not None and kind.kind == "fine_tune"


def test_a_resume_is_matched_to_its_checkpoint_at_the_logging_interval() -> None:
    """Logged every 5 steps, a resume from checkpoint-100 shows at step 105: the checkpoint's
    gaps must still count as the resume's (a warning when they change the updates)."""
    from tscope.analyzers.explainers.optimizer_state import _resume_tolerance
    from tscope.ingest.assemble import assemble_run
    from tscope.model import LogRead

    rows = [(step, LOSS, 3.0 - step / 1000, LOSS) for step in range(5, 205, 5)]
    read = LogRead(kind="synthetic", path="l.jsonl", metrics=LogRead.rows_to_table(rows, "l.jsonl"))
    assert _resume_tolerance(assemble_run("r", "/r", [read], [])) == 5
    assert _resume_tolerance(make_run({LOSS: np.linspace(3, 2, 50)})) == 2
