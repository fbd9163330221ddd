"""lr_schedule_jump when the schedule starts over: the LR drops mid-decay to the warm-up's start
and warms up again to its first peak.

A scheduler rebuilt at a resume instead of restored (its state_dict not loaded) runs its warm-up
and decay again from the resumed step: the logged LR falls from where the decay had got to down
to the warm-up's first value, then ramps back to the first peak and decays anew. Two hunts of
session 25 (an accelerate run, a plain loop resumed from step 500) each made one; both read as
healthy, the drop an `info` ("downward steps are info") and the ramp no jump at all (it climbs).
A warm restart by design (cosine with restarts, SGDR) starts a cycle from the previous one's
floor, not from mid-decay, and jumps back to the peak instead of ramping (learning_rate.py's
restart rule).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from tscope.analyzers.signals import fmt
from tscope.model import Finding

if TYPE_CHECKING:
    from tscope.analyzers.explainers.learning_rate import LrJump

# The drop starts from at least this share of the run's earlier peak (mid-decay, not a floor)...
REWARM_FROM = 0.2
# ...falls to at most this share of where it was (the warm-up's first value)...
REWARM_DROP = 0.2
# ...and the LR climbs back to at least this share of the earlier peak within REWARM_POINTS.
REWARM_PEAK_SHARE = 0.9
REWARM_POINTS = 200


def earlier_peak(steps: np.ndarray, lrs: np.ndarray, until: int) -> tuple[int, float] | None:
    """(step, LR) of the highest finite LR before index `until`; None when there is none."""
    finite = np.isfinite(lrs[:until])
    if not finite.any():
        return None
    earlier = lrs[:until][finite]
    best = int(np.argmax(earlier))
    return int(steps[:until][finite][best]), float(earlier[best])


def schedule_restart(steps: np.ndarray, lrs: np.ndarray, jump: LrJump) -> Finding | None:
    """The warning for a downward `jump` that is the schedule starting over, else None."""
    found = earlier_peak(steps, lrs, jump.index)
    if jump.factor >= 1 or found is None:
        return None
    peak_step, peak = found
    if not (jump.before >= REWARM_FROM * peak and jump.after <= REWARM_DROP * jump.before):
        return None
    ahead = lrs[jump.index : jump.index + REWARM_POINTS]
    back = np.flatnonzero(np.isfinite(ahead) & (ahead >= REWARM_PEAK_SHARE * peak))
    if back.size == 0:
        return None
    # The climb must be a ramp, not one jump back (a jump back is learning_rate's restart or
    # transient rule): at least two points strictly between the bottom and the top.
    top = jump.index + int(back[0])
    between = lrs[jump.index + 1 : top]
    if np.count_nonzero((between > jump.after) & (between < REWARM_PEAK_SHARE * peak)) < 2:
        return None
    return Finding(
        category="lr_schedule_jump",
        severity="warning",
        confidence=0.8,
        step=jump.step,
        layer=None,
        message=(
            f"The learning-rate schedule started over at step {jump.step}: the LR fell from "
            f"{fmt(jump.before)} to {fmt(jump.after)} in the middle of its decay, then warmed up "
            f"again to {fmt(float(lrs[top]))} by step {int(steps[top])} (its first peak: "
            f"{fmt(peak)} at step {peak_step}) — a scheduler rebuilt at a resume instead of "
            "restored, so the run trains through its warm-up and decay a second time."
        ),
        evidence={
            "lr_before": jump.before,
            "lr_after": jump.after,
            "factor": jump.factor,
            "rewarmed_to_lr": float(lrs[top]),
            "rewarmed_by_step": int(steps[top]),
            "earlier_peak_lr": peak,
            "earlier_peak_step": peak_step,
        },
        suggestion=(
            "Restore the scheduler's state with the optimizer's when resuming (Trainer: keep "
            "scheduler.pt; a plain loop: scheduler.load_state_dict), or rebuild it with the "
            "steps already taken (last_epoch)."
        ),
        threshold=(
            f"a drop from ≥ {REWARM_FROM:.0%} of the earlier peak to ≤ {REWARM_DROP:.0%} of "
            f"its level, then a ramp back to ≥ {REWARM_PEAK_SHARE:.0%} of that peak within "
            f"{REWARM_POINTS} points"
        ),
    )
