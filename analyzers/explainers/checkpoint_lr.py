"""lr_schedule_jump from checkpoints alone: the LR the optimizer's param groups hold, step to step.

A checkpoint's optimizer state saves each param group's current `lr`. Between two checkpoints a
healthy schedule either decays (cosine, linear, step decay: the LR falls) or warms up; a warm-up
that rises linearly from 0 multiplies the LR by at most step₂ / step₁ between checkpoints at steps
step₁ < step₂, and any warm-up that starts above 0 by less. A rise beyond both that bound and
CHECKPOINT_LR_JUMP_FACTOR is a change no warm-up or decay explains: a scheduler bug, a mis-set
multiplier, a restart. With a logged LR the learning-rate explainer reports jumps at their exact
step instead, so this one runs only when the logs hold none.
"""

from __future__ import annotations

import itertools

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.learning_rate import incidents_after
from tscope.analyzers.signals import fmt
from tscope.model import Finding
from tscope.model.metric_names import LEARNING_RATE

# Measured (scripts/measure_checkpoint_rules.py, issue 11): the 15 consecutive checkpoint pairs of
# the 12 healthy real-producer runs rise by at most ×2.0 — the gentle warm-up control between its
# checkpoints at steps 10 and 20, exactly its warm-up bound 20 / 10, which the rule allows — so 0
# warnings in 12 runs (too few to show ≤ 1 in 100); the planted persistent LR ×15 gives ×15.
CHECKPOINT_LR_JUMP_FACTOR = 2.0
# Float slack on the warm-up bound (a Trainer's linear warm-up is step / warmup_steps exactly).
WARMUP_BOUND_SLACK = 1.05


def is_lr_jump(first: int, second: int, before: float, after: float) -> bool:
    """The LR rose between checkpoints at steps first < second by more than a schedule can."""
    if before <= 0 or first <= 0:
        return False
    factor = after / before
    return factor >= CHECKPOINT_LR_JUMP_FACTOR and factor > second / first * WARMUP_BOUND_SLACK


class CheckpointLrExplainer:
    name = "checkpoint_lr"
    categories: tuple[str, ...] = ("lr_schedule_jump",)
    defines = ()  # its categories are declared by the explainers that mainly produce them

    def run(self, evidence: Evidence) -> list[Finding]:
        if evidence.checkpoints is None or evidence.run.has(LEARNING_RATE):
            return []
        rates = evidence.checkpoints.lr_by_step()
        resumes = [event.step for event in evidence.run.events_of("resume")]
        findings = []
        steps = sorted(rates)
        for first, second in itertools.pairwise(steps):
            before, after = rates[first], rates[second]
            if not is_lr_jump(first, second, before, after):
                continue
            warmup_bound = second / first
            if any(first < step <= second for step in resumes):
                continue  # a resume in the window: resume_discontinuity's case
            findings.append(
                _finding(evidence, first, second, before, after, steps, rates, warmup_bound)
            )
        return findings


def _finding(
    evidence: Evidence,
    first: int,
    second: int,
    before: float,
    after: float,
    steps: list[int],
    rates: dict[int, float],
    warmup_bound: float,
) -> Finding:
    factor = after / before
    later = [s for s in steps if s > second]
    stayed = [s for s in later if rates[s] >= 0.5 * after]
    followed = incidents_after(evidence.run, evidence.spikes, first)
    followed = [s for s in followed if s.onset_step <= second]
    message = (
        f"The learning rate the optimizer state holds jumped ×{fmt(factor)} between the "
        f"checkpoints at steps {first} ({fmt(before)}) and {second} ({fmt(after)}): more than "
        f"a warm-up could rise over these steps (≤ ×{fmt(warmup_bound)}), and schedules "
        "otherwise decay. Checkpoints this far apart cannot tell a jump from a steep ramp."
    )
    if later:
        message += (
            f" It stayed raised through step {stayed[-1]}."
            if len(stayed) == len(later)
            else f" It was back down by step {next(s for s in later if s not in stayed)}."
        )
    if followed:
        message += f" The loss spiked in this window (peak at step {followed[0].peak_step})."
    return Finding(
        category="lr_schedule_jump",
        severity="warning",
        confidence=0.85 if followed else 0.7,
        step=second,
        layer=None,
        message=message,
        evidence={
            "checkpoint_steps": [first, second],
            "lr_before": before,
            "lr_after": after,
            "factor": factor,
            "warmup_bound": warmup_bound,
            "stayed_raised_through": stayed[-1] if later and len(stayed) == len(later) else None,
            "lr_by_checkpoint": {str(s): rates[s] for s in steps},
            "followed_by_spike": followed[0].id if followed else None,
        },
        suggestion=(
            "Check the scheduler (a custom lambda, a multiplier, a restart or a mis-set milestone) "
            f"and the resume logic; log the learning rate to find the exact step, and restart from "
            f"the checkpoint at step {first} with the intended LR."
        ),
        source="checkpoints",
        spike_id=followed[0].id if followed else None,
        threshold=(
            f"LR held by the optimizer rises ≥ ×{CHECKPOINT_LR_JUMP_FACTOR:g} between consecutive "
            "checkpoints and more than a linear warm-up from 0 could (step₂ / step₁)"
        ),
    )
