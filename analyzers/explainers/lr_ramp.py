"""lr_ramp: the logged learning rate climbs, after its warm-up, past the peak the warm-up reached.

A schedule rises only while it warms up (a linear, exponential or re-started warm-up), and every
legitimate shape after that — cosine or linear decay, constant, warm-up–stable–decay,
inverse-sqrt, cosine with warm restarts, a cyclic (triangular) schedule, the re-warm-up of a
resumed run — stays at or below the peak its first warm-up reached: restarts and cycles climb back
to that peak, not beyond. A smooth climb well past it, point after point, is a schedule bug (a
multiplier compounding each step, a mis-set `lr_lambda`, a scheduler stepped too often) and is
visible in the LR before the loss reacts. A climb in one logged interval is a jump
(`lr_schedule_jump`, learning_rate.py), not a ramp. Where the schedule's decay cancels the
multiplier, the LR climbs back from the middle of its decay without passing the peak; legitimate
climbs start from the schedule's floor instead (a climb back, lr_ramp_shape.py).

The finding's step is the ramp's start (the first point above the low it climbed from); its
evidence holds where it passed RAMP_MIN_FACTOR× and 2× the warm-up's peak, its growth per step,
and where the loss reacted (the lead from the start).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.divergence import loss_rise
from tscope.analyzers.explainers.lr_ramp_shape import (
    CLIMB_BACK_FLOOR_FACTOR,
    CLIMB_BACK_MIN_FACTOR,
    CLIMB_BACK_START_SHARE,
    RAMP_MAX_INTERVAL_SHARE,
    RAMP_MIN_FACTOR,
    RAMP_MIN_RISING_POINTS,
    LrRamp,
    lr_ramp,
)
from tscope.analyzers.signals import fmt, loss_series, primary_loss
from tscope.analyzers.spike_judgement import is_notable
from tscope.model import Finding
from tscope.model.categories import Category
from tscope.model.metric_names import LEARNING_RATE

# A climb back is a weaker reading than a climb past the peak (the LR never exceeded what the run
# had trained at): a lower prior, which also keeps its calibration cell apart from the climb past.
CLIMB_BACK_CONFIDENCE = 0.6
# Confidence that a ramp finding names the run's cause: Laplace's estimate (k + 1) / (n + 2) of
# the rule's precision where it fired, k = n = 8 dev ramps (0 firings on healthy runs): 0.9.
RAMP_CONFIDENCE = 0.9


class LrRampExplainer:
    name = "lr_ramp"
    categories: tuple[str, ...] = ("lr_ramp",)
    defines = (
        Category(
            "lr_ramp",
            "cause",
            "warning",
            "logs",
            "a learning-rate ramp past the schedule's peak",
            "after its warm-up the LR climbs, point after point, past the peak the warm-up reached "
            "or back from the middle of its decay (evidence: start, where it passed 1.25× and 2× "
            "the peak, growth per step, the loss's lead)",
            story_signal="learning_rate",
        ),
    )

    def run(self, evidence: Evidence) -> list[Finding]:
        run = evidence.run
        if not run.has(LEARNING_RATE):
            return []
        ramp = lr_ramp(*run.series(LEARNING_RATE))
        if ramp is None:
            return []
        if any(ramp.low_step < e.step <= ramp.cross_step for e in run.events_of("resume")):
            return []  # a resumed run's LR restarted differently: resume_discontinuity's case
        return [_finding(evidence, ramp)]


@dataclass(frozen=True)
class LossReaction:
    step: int  # onset of the first warning-level loss incident at or after the ramp's start
    spike_id: str | None  # None for a lasting rise (a divergence)
    lr: float  # the LR logged at (or last before) that step


def loss_reaction(evidence: Evidence, ramp: LrRamp) -> LossReaction | None:
    """The first loss incident worth a warning (the impact rule: `is_notable`, or a lasting rise)
    that starts at or after the ramp's first raised point."""
    run = evidence.run
    loss = primary_loss(run)
    if loss is None:
        return None
    candidates: list[tuple[int, str | None]] = [
        (s.onset_step, s.id)
        for s in evidence.spikes_on(loss)
        if s.onset_step >= ramp.start_step and is_notable(run, s, evidence.spikes)
    ]
    loss_steps, loss_values = loss_series(run, loss)
    rise = loss_rise(loss_steps, loss_values)
    if rise is not None and int(loss_steps[rise[0]]) >= ramp.start_step:
        candidates.append((int(loss_steps[rise[0]]), None))
    if not candidates:
        return None
    step, spike_id = min(candidates, key=lambda c: c[0])
    lr_steps, lrs = run.series(LEARNING_RATE)
    upto = lrs[(lr_steps <= step) & np.isfinite(lrs)]
    return LossReaction(step, spike_id, float(upto[-1]) if upto.size else float("nan"))


def _finding(evidence: Evidence, ramp: LrRamp) -> Finding:
    reaction = loss_reaction(evidence, ramp)
    doubled = f" and 2× at step {ramp.double_step}" if ramp.double_step is not None else ""
    if ramp.past_peak:
        message = (
            f"The learning rate ramped up past its warm-up peak ({fmt(ramp.peak_lr)} at step "
            f"{ramp.peak_step}): from step {ramp.start_step} it grew ×{ramp.growth_per_step:.3f} "
            f"per step for {ramp.rising_points} logged points, passing {RAMP_MIN_FACTOR:g}× the "
            f"peak at step {ramp.cross_step}{doubled}, up to {fmt(ramp.top_lr)} "
            f"(×{fmt(ramp.factor)}) at step {ramp.top_step}. A schedule rises only while warming "
            "up; restarts and cycles come back to the warm-up peak, not beyond."
        )
        threshold = (
            f"after the warm-up, LR > {RAMP_MIN_FACTOR:g}× the warm-up's peak, climbing over ≥ "
            f"{RAMP_MIN_RISING_POINTS} consecutive rising logged points with no interval "
            f"carrying > {RAMP_MAX_INTERVAL_SHARE:.0%} of the rise"
        )
    else:
        message = (
            f"The learning rate climbed back in the middle of its decay: from {fmt(ramp.low_lr)} "
            f"at step {ramp.low_step} ({fmt(ramp.low_lr / ramp.peak_lr)}× the warm-up's peak "
            f"{fmt(ramp.peak_lr)} at step {ramp.peak_step}) it grew ×{ramp.growth_per_step:.3f} "
            f"per step for {ramp.rising_points} logged points, up to {fmt(ramp.top_lr)} "
            f"(×{fmt(ramp.top_lr / ramp.low_lr)} its low, ×{fmt(ramp.factor)} the peak) at step "
            f"{ramp.top_step}. A schedule climbs again after its warm-up only from its floor (a "
            "cycle's base, a restart's minimum, a re-warm-up from 0), not from the middle of its "
            "decay: a multiplier compounding against the decay looks like this."
        )
        threshold = (
            f"after the warm-up, the LR climbs ≥ {CLIMB_BACK_MIN_FACTOR:g}× from a low above "
            f"{CLIMB_BACK_FLOOR_FACTOR:g}× the warm-up's first LR, over ≥ {RAMP_MIN_RISING_POINTS} "
            f"consecutive rising logged points, not easing in and out of its low (both under "
            f"{CLIMB_BACK_START_SHARE:.0%} of their speed nearby), none carrying > "
            f"{RAMP_MAX_INTERVAL_SHARE:.0%} of the rise"
        )
    if reaction is not None:
        message += (
            f" The loss reacted {reaction.step - ramp.start_step} steps after the ramp began "
            f"(from step {reaction.step}, LR ×{fmt(reaction.lr / ramp.peak_lr)} the peak)."
        )
    else:
        last = int(evidence.run.series(LEARNING_RATE)[0][-1])
        message += (
            f" The loss has not reacted by the log's end (step {last}): the LR is caught before "
            "it breaks the run."
        )
    return Finding(
        category="lr_ramp",
        severity="warning",
        confidence=RAMP_CONFIDENCE if ramp.past_peak else CLIMB_BACK_CONFIDENCE,
        step=ramp.start_step,
        layer=None,
        message=message,
        evidence={
            "shape": "ramp",
            "warmup_peak_step": ramp.peak_step,
            "warmup_peak_lr": ramp.peak_lr,
            "ramp_low_step": ramp.low_step,
            "ramp_low_lr": ramp.low_lr,
            "ramp_start_step": ramp.start_step,
            "passed_threshold_step": ramp.cross_step,
            "passed_double_step": ramp.double_step,
            "top_step": ramp.top_step,
            "top_lr": ramp.top_lr,
            "factor_over_peak": ramp.factor,
            "growth_per_step": ramp.growth_per_step,
            "rising_points": ramp.rising_points,
            "past_peak": ramp.past_peak,
            "loss_reaction_step": reaction.step if reaction else None,
            "lead_steps": reaction.step - ramp.start_step if reaction else None,
            "lr_at_loss_reaction": reaction.lr if reaction else None,
        },
        suggestion=(
            "Check the scheduler: a multiplier applied to the current LR instead of the base "
            "(compounding), an lr_lambda that grows, or scheduler.step() called more often than "
            f"intended; restart from a checkpoint before step {ramp.start_step} with the "
            "intended schedule."
        ),
        spike_id=reaction.spike_id if reaction else None,
        threshold=threshold,
    )
