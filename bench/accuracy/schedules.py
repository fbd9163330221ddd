"""Learning-rate multipliers (of the run's peak LR) for every producer, with the planted LR causes.

`multiplier(spec, optimizer_step)` numbers optimizer steps from 1, as the Trainer's global_step;
for `torch.optim.lr_scheduler.LambdaLR` (which counts from 0) use `lambda i: multiplier(spec, i+1)`.
The base shapes are those of transformers.optimization (linear warm-up, then cosine to 0, linear to
0, or constant); a resume that lost its scheduler restarts the count, which the producers do by
building a fresh scheduler.
"""

from __future__ import annotations

import math

from spec import (
    LR_JUMP_PERSISTENT,
    LR_JUMP_TRANSIENT,
    LR_RAMP,
    WARMUP_TOO_HOT,
    RunSpec,
)

# Legitimate schedules that rise again after their warm-up, for measuring false alarms of the LR
# rules (scripts/measure_lr_ramp.py; no benchmark spec draws them, so no cache key changes):
# cosine with hard restarts (transformers' get_cosine_with_hard_restarts_schedule_with_warmup),
# a triangular cycle (torch's CyclicLR, mode "triangular"), warm-up–stable–decay, inverse square
# root (transformers' get_inverse_sqrt_schedule) and a second warm-up half way, as a resumed run
# that rebuilt its scheduler re-warms. Also drawn by the out-of-distribution set (bench/ood/), with
# step decay (torch's MultiStepLR, gamma 0.1, after the warm-up) and polynomial decay
# (transformers' get_polynomial_decay_schedule_with_warmup, power 2, to 0).
EXTRA_SCHEDULES = (
    "cosine_restarts",
    "cyclic",
    "wsd",
    "inverse_sqrt",
    "rewarm",
    "step",
    "polynomial",
)
RESTART_CYCLES = 3
CYCLIC_HALF_PERIOD = 15
CYCLIC_BASE = 0.1
WSD_DECAY_FRACTION = 0.2
STEP_DECAY_MILESTONES = (0.5, 0.75)  # fractions of the run after warm-up where the LR drops
STEP_DECAY_GAMMA = 0.1
POLYNOMIAL_POWER = 2.0
# bench/ood: transformers' lr_scheduler_type "cosine_with_min_lr" (its
# get_cosine_with_min_lr_schedule_with_warmup) with lr_scheduler_kwargs {"min_lr_rate": 0.1}.
COSINE_MIN_LR_RATE = 0.1


def base_multiplier(
    schedule: str, scheduler_step: int, warmup_steps: int, total_steps: int
) -> float:
    if schedule == "cyclic":
        phase = scheduler_step % (2 * CYCLIC_HALF_PERIOD) / CYCLIC_HALF_PERIOD
        return CYCLIC_BASE + (1 - CYCLIC_BASE) * (phase if phase <= 1 else 2 - phase)
    if schedule == "rewarm" and scheduler_step >= total_steps // 2:
        return base_multiplier(
            "cosine", scheduler_step - total_steps // 2, warmup_steps, total_steps
        )
    if scheduler_step < warmup_steps:
        return float(scheduler_step) / float(max(1, warmup_steps))
    progress = float(scheduler_step - warmup_steps) / float(max(1, total_steps - warmup_steps))
    if schedule == "cosine_restarts":
        return 0.5 * (1.0 + math.cos(math.pi * ((RESTART_CYCLES * progress) % 1.0)))
    if schedule == "wsd":
        return min(1.0, (1.0 - progress) / WSD_DECAY_FRACTION)
    if schedule == "inverse_sqrt":
        return math.sqrt(max(1, warmup_steps) / max(1, scheduler_step))
    if schedule == "step":
        drops = sum(progress >= milestone for milestone in STEP_DECAY_MILESTONES)
        return float(STEP_DECAY_GAMMA**drops)
    if schedule == "polynomial":
        return max(0.0, 1.0 - progress) ** POLYNOMIAL_POWER
    if schedule == "cosine_min_lr":
        cosine = max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
        return cosine * (1.0 - COSINE_MIN_LR_RATE) + COSINE_MIN_LR_RATE
    if schedule in ("cosine", "rewarm"):
        return max(0.0, 0.5 * (1.0 + math.cos(math.pi * progress)))
    if schedule == "linear":
        return max(0.0, 1.0 - progress)
    if schedule == "constant":
        return 1.0
    raise ValueError(f"unknown schedule {schedule!r}")


def multiplier(spec: RunSpec, optimizer_step: int) -> float:
    """The LR of `optimizer_step` over `spec.peak_lr`, planted LR causes included."""
    base = base_multiplier(spec.schedule, optimizer_step - 1, spec.warmup_steps, spec.steps)
    plant = spec.plant
    first = int(plant.get("step", 0))
    if spec.cause == LR_JUMP_TRANSIENT and first <= optimizer_step < first + int(plant["window"]):
        return base * float(plant["factor"])
    if spec.cause == LR_JUMP_PERSISTENT and optimizer_step >= first:
        return base * float(plant["factor"])
    if spec.cause == LR_RAMP and optimizer_step >= first:
        return base * float(plant["growth"]) ** (optimizer_step - first + 1)
    if spec.cause == WARMUP_TOO_HOT:
        return base * float(plant["lr_factor"])
    return base
