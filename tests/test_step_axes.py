"""A log counted in micro-batches and checkpoints dated by optimizer updates (analyzers/step_axes.py).

An accelerate loop accumulating 4 micro-batches and logging per micro-batch was told to restart
from `checkpoint_2 (step 300)`, "the newest from before step 600": 300 updates are micro-batch
1,200, after the incident. The factor is taken only when the logged LR is stairs of k points and
every checkpoint's stored LR is the one logged at k times its step, not at its step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tests.synthetic import make_run
from tscope.analyzers.base import Evidence
from tscope.analyzers.step_axes import logged_steps_per_checkpoint_step
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.evidence import read_checkpoints
from tscope.model import CheckpointInfo, Run
from tscope.model.checkpoint import CheckpointEvidence, CheckpointSnapshot, ResumeAudit
from tscope.model.metric_names import LEARNING_RATE, LOSS
from tscope.pipeline import analyze_run

COMPLETE = ResumeAudit(True, True, True, True, None, (0,), 1, None)
UPDATES = 300
PER_UPDATE = 4


def _lr(update: np.ndarray) -> np.ndarray:
    return (
        1e-3 * np.minimum((update + 1) / 50, 1.0) * (0.5 + 0.5 * np.cos(np.pi * update / UPDATES))
    )


def _checkpoints(steps: list[int]) -> CheckpointEvidence:
    return CheckpointEvidence(
        tuple(
            CheckpointSnapshot(
                info=CheckpointInfo(s, f"checkpoints/checkpoint_{i}", "accelerate", True, True),
                audit=COMPLETE,
                optimizer_step=s,
                param_groups=({"lr": float(_lr(np.array(s)))},),
            )
            for i, s in enumerate(steps)
        )
    )


def _micro_batch_run() -> Run:
    updates = np.repeat(np.arange(UPDATES), PER_UPDATE)  # the LR of each micro-batch's update
    loss = 3.0 - 0.001 * np.arange(updates.size)
    return make_run({LOSS: loss, LEARNING_RATE: _lr(updates)}, first_step=0)


def test_update_dated_checkpoints_beside_a_micro_batch_log_are_scaled() -> None:
    evidence = Evidence(_micro_batch_run(), checkpoints=_checkpoints([100, 200, 300]))
    assert logged_steps_per_checkpoint_step(evidence) == PER_UPDATE


def test_checkpoints_on_the_logs_own_axis_are_not_scaled() -> None:
    """Checkpoints named by micro-batch (their stored LR is the one logged at their own step)."""
    run = _micro_batch_run()
    on_axis = CheckpointEvidence(
        tuple(
            CheckpointSnapshot(
                info=CheckpointInfo(s, f"ckpt_{s}.pt", "nanogpt", True, True),
                audit=COMPLETE,
                optimizer_step=s // PER_UPDATE,
                param_groups=({"lr": float(_lr(np.array(s // PER_UPDATE)))},),
            )
            for s in (400, 800)
        )
    )
    assert logged_steps_per_checkpoint_step(Evidence(run, checkpoints=on_axis)) == 1
    fixture = Path(__file__).resolve().parent / "data" / "optimizer_families" / "accum4_microsteps"
    read, _ = read_checkpoints(fixture, LoadOptions())
    real = Evidence(analyze_run(fixture).run, checkpoints=read)
    assert logged_steps_per_checkpoint_step(real) == 1


def test_a_log_of_one_point_per_update_is_not_scaled() -> None:
    run = make_run({LOSS: np.linspace(3, 2, UPDATES), LEARNING_RATE: _lr(np.arange(UPDATES))})
    evidence = Evidence(run, checkpoints=_checkpoints([100, 200, 300]))
    assert logged_steps_per_checkpoint_step(evidence) == 1
