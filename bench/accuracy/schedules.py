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


def base_multiplier(
    schedule: str, scheduler_step: int, warmup_steps: int, total_steps: int
) -> float:
    if scheduler_step < warmup_steps:
        return float(scheduler_step) / float(max(1, warmup_steps))
    progress = float(scheduler_step - warmup_steps) / float(max(1, total_steps - warmup_steps))
    if schedule == "cosine":
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
