"""Whether the logged learning rate moved up just before a step: a break there is the LR's to
explain, not a batch's (bad_batch_logs) and not a resume's alone (resume)."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.explainers.learning_rate import lr_jumps
from tscope.analyzers.resume_window import loss_points_between
from tscope.model import Run
from tscope.model.metric_names import LEARNING_RATE

# A break within this many logged points after a logged LR jump is the jump's (the LR explainer
# names it), and so is a break while the LR climbs: ≥ LR_RISE_FACTOR × its lowest value over the
# LR_RISE_LOOKBACK_POINTS logged LR points before. After the early phase a healthy schedule
# decays or holds; on the dev split the only two breaks this rule gave away from a planted bad
# batch were both in LR-ramp runs, 69 and 66 steps into a ×1.04–1.12-per-step climb.
LR_JUMP_LOOKBACK_POINTS = 10
LR_RISE_LOOKBACK_POINTS = 20
LR_RISE_FACTOR = 1.25


def lr_moved_up(run: Run, step: int) -> bool:
    """The logged LR jumped within LR_JUMP_LOOKBACK_POINTS before `step`, or has been climbing
    (see LR_RISE_FACTOR): the break is the LR's to explain, not a batch's."""
    if not run.has(LEARNING_RATE):
        return False
    steps, lrs = run.series(LEARNING_RATE)
    if any(
        0 <= loss_points_between(run, jump.step, step) <= LR_JUMP_LOOKBACK_POINTS
        for jump in lr_jumps(steps, lrs)
    ):
        return True
    before = lrs[steps <= step][-LR_RISE_LOOKBACK_POINTS - 1 :]
    before = before[np.isfinite(before) & (before > 0)]
    return bool(before.size >= 2 and before[-1] >= LR_RISE_FACTOR * before.min())
