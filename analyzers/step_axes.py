"""How many logged steps one checkpoint step spans: 1, or k when the log counts micro-batches.

A loop that accumulates gradients over k micro-batches and logs per micro-batch (an accelerate
loop logging by batch index) numbers its log in micro-batches, while its checkpoints are dated
by the optimizer's update counter (accelerate's automatic naming, read from the optimizer
state). Compared on one axis, a checkpoint at update 300 read as "before step 600", where the
log's step 600 is update 150: a helper-made run was told to restart from a checkpoint saved
after its incident. The factor is taken only when two records agree: the logged LR is stairs of
k equal points (one value per update) and every checkpoint's stored LR is the logged LR at k
times its step, not at its step.
"""

from __future__ import annotations

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.lr_stairs import stair_length
from tscope.model.metric_names import LEARNING_RATE

# A checkpoint's stored LR matches a logged one within this (float32 storage, printed digits).
LR_MATCH_RELATIVE = 0.01


def logged_steps_per_checkpoint_step(evidence: Evidence) -> int:
    """k when the log counts k steps per checkpoint step (see the module), else 1."""
    run = evidence.run
    if evidence.checkpoints is None or not run.has(LEARNING_RATE):
        return 1
    rates = {s: lr for s, lr in evidence.checkpoints.lr_by_step().items() if lr > 0}
    steps, lrs = run.series(LEARNING_RATE)
    keep = np.isfinite(lrs)
    steps, lrs = steps[keep], lrs[keep]
    k = stair_length(lrs)
    if k is None or not rates or _agree(steps, lrs, rates, 1) is not False:
        return 1
    return k if _agree(steps, lrs, rates, k) else 1


def _agree(steps: np.ndarray, lrs: np.ndarray, rates: dict[int, float], k: int) -> bool | None:
    """Whether every checkpoint's LR is logged within k steps of k × its step (None when no
    checkpoint falls inside the log)."""
    checked = 0
    for step, lr in rates.items():
        near = np.abs(steps - k * step) <= k
        if not near.any():
            continue
        if not np.any(np.abs(lrs[near] / lr - 1.0) <= LR_MATCH_RELATIVE):
            return False
        checked += 1
    return True if checked else None
