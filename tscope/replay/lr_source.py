"""The learning rate of every replayed step, from the most exact source available.

1. The log, when it holds every replayed step at full precision: the logged learning_rate of step
   k is the rate step k's update used (Trainer logs it after optimizer.step, before
   scheduler.step), and a JSON float round-trips exactly.
2. The entry file's learning_rate(step).
3. The Trainer's scheduler rebuilt from training_args (transformers.get_scheduler) with
   scheduler.pt. Custom LambdaLR functions are not saved (scheduler.pt holds only the callable's
   __dict__), so this is the Trainer's own schedule only.
4. The optimizer's saved learning rate, held constant, with a caveat.

Only group 0's rate is logged; other groups keep their ratio to it at the checkpoint.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

# Relative gap between a float32 logged rate and a rebuilt schedule that still counts as the same
# rate: float32 keeps 24 bits (relative spacing 2^-23 ≈ 1.2e-7), so rounding stays below half.
FLOAT32_MATCH_REL = 1.2e-7


@dataclass(frozen=True)
class LrPlan:
    source: str  # "log", "entry", "scheduler" or "constant"
    group_lrs: dict[int, tuple[float, ...]]  # step -> learning rate of every param group
    notes: tuple[str, ...] = ()
    caveats: tuple[str, ...] = ()

    def for_step(self, step: int) -> tuple[float, ...]:
        return self.group_lrs[step]


# (first step, last step) -> {step: per-group rates}, or None when it cannot be rebuilt
ScheduleBuilder = Callable[[int, int], "dict[int, tuple[float, ...]] | None"]


def plan_learning_rates(
    first: int,
    last: int,
    logged: Mapping[int, float],
    checkpoint_group_lrs: list[float],
    entry_lr: Callable[[int], float] | None,
    schedule: ScheduleBuilder | None,
) -> LrPlan:
    steps = range(first, last + 1)
    ratios = group_ratios(checkpoint_group_lrs)
    from_log = {s: logged[s] for s in steps if s in logged and math.isfinite(logged[s])}
    if len(from_log) == len(steps):
        log_plan = {s: tuple(_scaled(from_log[s], r) for r in ratios) for s in steps}
        if not _float32_rounded(list(from_log.values())):
            return LrPlan("log", log_plan, ("learning rate of every step from the log",))
        # A float32 log (TensorBoard) is off by up to 6e-8: a schedule that agrees with it to
        # float32 precision gives the exact rates.
        rebuilt = schedule(first, last) if schedule is not None else None
        if rebuilt is not None and _agrees(rebuilt, from_log):
            note = "rebuilt Trainer schedule (it matches the float32 logged rates exactly)"
            return LrPlan("scheduler", rebuilt, (note,))
        caveat = "learning rates from a float32 log: updates may differ by ~1e-7 relative"
        return LrPlan("log", log_plan, ("learning rate of every step from the log",), (caveat,))
    if entry_lr is not None:
        plan = {s: tuple(_scaled(float(entry_lr(s)), r) for r in ratios) for s in steps}
        return LrPlan("entry", plan, ("learning rate from the entry file's learning_rate(step)",))
    rebuilt = schedule(first, last) if schedule is not None else None
    if rebuilt is not None:
        caveats: tuple[str, ...] = ()
        if from_log and not _agrees(rebuilt, from_log, rel=1e-6):
            caveats = ("the rebuilt schedule disagrees with the logged learning rates",)
        note = "rebuilt Trainer schedule from training_args and scheduler.pt"
        return LrPlan("scheduler", rebuilt, (note,), caveats)
    constant = tuple(checkpoint_group_lrs)
    caveat = (
        f"learning rate held at the checkpoint's {constant[0]:.4g}: the log lacks it for "
        f"{len(steps) - len(from_log)} of {len(steps)} steps and no schedule could be rebuilt"
    )
    return LrPlan("constant", dict.fromkeys(steps, constant), (), (caveat,))


def group_ratios(group_lrs: list[float]) -> list[float]:
    """Each group's rate relative to group 0 (1.0 when group 0's rate is zero)."""
    if not group_lrs:
        return [1.0]
    base = group_lrs[0]
    return [lr / base if base else 1.0 for lr in group_lrs]


def _scaled(lr: float, ratio: float) -> float:
    return lr if ratio == 1.0 else lr * ratio  # keep the logged float bit for bit


def _float32_rounded(values: list[float]) -> bool:
    nonzero = [v for v in values if v != 0.0]
    return bool(nonzero) and all(float(np.float32(v)) == v for v in nonzero)


def _agrees(
    rebuilt: Mapping[int, tuple[float, ...]],
    logged: Mapping[int, float],
    rel: float = FLOAT32_MATCH_REL,
) -> bool:
    for step, value in logged.items():
        if step not in rebuilt:
            continue
        mine = rebuilt[step][0]
        if abs(mine - value) > rel * max(abs(value), abs(mine)):
            return False
    return True


def trainer_schedule(
    training_args: Mapping[str, Any],
    trainer_state: Mapping[str, Any],
    scheduler_state: Any | None,
    group_lrs: list[float],
) -> ScheduleBuilder | None:
    """A builder for the Trainer's own schedule (transformers.get_scheduler), or None.

    The schedule runs on a throwaway optimizer, so the real one is never touched: a LambdaLR
    sets every group's lr to base·λ(0) when built, which is why Trainer creates its scheduler
    before optimizer.load_state_dict (otherwise the first resumed step runs at λ(0), often 0).
    Without scheduler.pt (the resume rule then also drops optimizer.pt) the schedule restarts
    from step 0 at training_args.learning_rate, as the resumed run did.
    """
    kind = training_args.get("lr_scheduler_type")
    total = trainer_state.get("max_steps") or training_args.get("max_steps")
    if not isinstance(kind, str) or not isinstance(total, int) or total <= 0:
        return None
    if kind == "reduce_lr_on_plateau":  # driven by eval metrics the replay does not have
        return None

    def build(first: int, last: int) -> dict[int, tuple[float, ...]] | None:
        try:
            import torch
            from transformers import get_scheduler
        except ImportError:
            return None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "scheduler.step() before optimizer.step()"
            # Every value here is a stranger's: training_args.bin decoded, scheduler.pt loaded
            # (whose load_state_dict sets any attribute it names on the scheduler). One that
            # does not fit means no rebuilt schedule, not a traceback: learning_rate "abc" was a
            # ValueError, a scheduler.pt holding a list an AttributeError, both uncaught.
            try:
                if scheduler_state is not None:
                    bases = [float(g) for g in scheduler_state.get("base_lrs", group_lrs)]
                else:
                    learning_rate = training_args.get("learning_rate", group_lrs[0])
                    bases = [float(learning_rate)] * len(group_lrs)
                probe = torch.optim.SGD([{"params": [torch.zeros(1)], "lr": b} for b in bases])
                scheduler = get_scheduler(
                    kind,
                    probe,
                    num_warmup_steps=_warmup_steps(training_args, total),
                    num_training_steps=total,
                    scheduler_specific_kwargs=training_args.get("lr_scheduler_kwargs") or {},
                )
                if scheduler_state is not None:
                    scheduler.load_state_dict(dict(scheduler_state))
                plan: dict[int, tuple[float, ...]] = {}
                for step in range(first, last + 1):
                    plan[step] = tuple(float(lr) for lr in scheduler.get_last_lr())
                    scheduler.step()
            except _UNFIT_VALUE_ERRORS:
                return None
        return plan

    return build


# What a schedule rebuilt from values that do not fit raises (see trainer_schedule).
_UNFIT_VALUE_ERRORS = (
    ValueError,
    TypeError,
    KeyError,
    AttributeError,
    OverflowError,
    ZeroDivisionError,
)


def _warmup_steps(args: Mapping[str, Any], total: int) -> int:
    """TrainingArguments.get_warmup_steps (v5.24: a float below 1 is a ratio; older versions
    keep the ratio in warmup_ratio)."""
    steps = float(args.get("warmup_steps") or 0)
    if steps >= 1:
        return int(steps)
    ratio = steps or float(args.get("warmup_ratio") or 0)
    return math.ceil(total * ratio)
