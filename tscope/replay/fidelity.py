"""Does the replay reproduce the run? Compare what the producer would have logged from the
replayed steps with what it did log, and say why not when it does not.

The producer's logging is reproduced, not approximated: Trainer logs the mean over its logging
window of the micro-batch losses accumulated in a float32 tensor, replacing a non-finite one by
the running mean (`logging_nan_inf_filter`, v5.24 trainer.py:1919-1931, 2262), so a 0.0 logged
for a NaN step is matched exactly; plain loops log each step's loss.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import replace

import numpy as np

from tscope.model.replay import (
    COMPARED,
    MISMATCH_NONFINITE,
    NONFINITE_AGREED,
    SKIPPED,
    Fidelity,
    ReplayStep,
    StepComparison,
)
from tscope.replay.diagnosis import ReplayConditions, likely_reasons
from tscope.replay.logs import TRAINER_LOGGING, LoggedSeries

# The bar for "reproduced". A float32 loss carries ~7 significant digits; summation order
# alone (a second CPU thread, another AdamW kernel) moves the fixture losses by ~2e-7 over 30
# steps, while a wrong batch, loss normaliser (1.6e-2) or learning rate (3.4e-3 at the first
# step) miss it by orders of magnitude.
REPRODUCED_REL_TOL = 1e-5
# Gradient norms sum squares over every parameter and drift faster than losses: a CUDA replay of
# the CPU-made fixture logs stays within 3e-7 on losses but reaches 1e-5 on grad norms over 30-60
# stable steps (H200, measured). A wrong clip threshold or normaliser misses by 4e-2 or more.
GRAD_NORM_REL_TOL = 1e-4
# A log whose losses all carry at most this many decimals was rounded by its writer (nanoGPT's
# stdout prints 4); the rounding then bounds what a comparison can show.
MAX_ROUNDED_DECIMALS = 6
MIN_VALUES_TO_JUDGE_ROUNDING = 3  # fewer logged values say nothing about a writer's rounding


def compare(
    steps: Sequence[ReplayStep], logs: LoggedSeries, conditions: ReplayConditions
) -> tuple[list[StepComparison], Fidelity]:
    decimals = logged_decimals(list(logs.loss.values()))
    if not steps:
        return [], _fidelity([], decimals, conditions, steps)
    by_step = {s.step: s for s in steps}
    first, last = steps[0].step, steps[-1].step
    comparisons = [
        _with_grad_and_lr(_compare_row(step, by_step, first, logs, decimals), by_step, logs)
        for step in sorted(s for s in logs.loss if first <= s <= last)
    ]
    return comparisons, _fidelity(comparisons, decimals, conditions, steps)


def logged_decimals(values: Sequence[float]) -> int | None:
    finite = [v for v in values if math.isfinite(v)]
    if len(finite) < MIN_VALUES_TO_JUDGE_ROUNDING:
        return None
    for decimals in range(MAX_ROUNDED_DECIMALS + 1):
        if all(abs(v - round(v, decimals)) <= 1e-12 * max(1.0, abs(v)) for v in finite):
            return decimals
    return None


def trainer_logged_loss(window: Sequence[ReplayStep], nan_filter: bool) -> float:
    """The Trainer's logged loss for a window of steps: float32 sum of micro-batch losses, a
    non-finite one replaced by the running mean, divided by the window's length."""
    total = np.float32(0.0)
    with np.errstate(all="ignore"):
        for done, step in enumerate(window):  # done = global_step - _globalstep_last_logged
            for value in step.micro_losses:
                micro = np.float32(value)
                if nan_filter and not np.isfinite(micro):
                    total = np.float32(total + total / np.float32(1 + done))
                else:
                    total = np.float32(total + micro)
    return float(total) / len(window)


def _compare_row(
    step: int, by_step: dict[int, ReplayStep], first: int, logs: LoggedSeries, decimals: int | None
) -> StepComparison:
    logged = logs.loss[step]
    window_first = _window_first(step, logs)
    window = (window_first, step)
    if window_first < first:
        note = f"the logged loss averages steps {window_first}-{step}, some before the checkpoint"
        return StepComparison(step, window, SKIPPED, logged, None, note=note)
    replayed = [by_step[s] for s in range(window_first, step + 1)]
    if logs.convention == TRAINER_LOGGING:
        expected = trainer_logged_loss(replayed, logs.nan_filter)
        replay_nonfinite = any(not math.isfinite(m) for s in replayed for m in s.micro_losses)
    else:
        expected = replayed[-1].loss
        replay_nonfinite = not math.isfinite(expected)
    if replay_nonfinite:
        logged_nonfinite = not math.isfinite(logged) or step in logs.hidden_nonfinite
        agreed = logged_nonfinite or expected == logged
        status = NONFINITE_AGREED if agreed else MISMATCH_NONFINITE
        note = "non-finite in the replay" + (" and in the run" if agreed else ", finite in the log")
        return StepComparison(step, window, status, logged, expected, note=note)
    if not math.isfinite(logged):
        note = "finite in the replay, non-finite in the log"
        return StepComparison(step, window, MISMATCH_NONFINITE, logged, expected, note=note)
    abs_diff = abs(expected - logged)
    return StepComparison(
        step,
        window,
        COMPARED,
        logged,
        expected,
        abs_diff=abs_diff,
        rel_diff=_relative(abs_diff, logged),
        bit_exact=_bit_exact(expected, logged, decimals),
    )


def _window_first(step: int, logs: LoggedSeries) -> int:
    if logs.convention != TRAINER_LOGGING:
        return step
    earlier = [s for s in logs.loss if s < step]
    return max(earlier) + 1 if earlier else 1


def _with_grad_and_lr(
    comparison: StepComparison, by_step: dict[int, ReplayStep], logs: LoggedSeries
) -> StepComparison:
    """The logged grad_norm and learning rate (of the logged step) next to the replayed ones."""
    replayed = by_step.get(comparison.step)
    if replayed is None:
        return comparison
    logged_grad = logs.grad_norm.get(comparison.step)
    grad_rel = None
    if logged_grad is not None and replayed.grad_norm is not None:
        both_nonfinite = not math.isfinite(logged_grad) and not math.isfinite(replayed.grad_norm)
        grad_rel = (
            0.0 if both_nonfinite else _relative(abs(replayed.grad_norm - logged_grad), logged_grad)
        )
        if grad_rel != 0.0 and float(np.float32(replayed.grad_norm)) == logged_grad:
            grad_rel = 0.0  # a float32 log holds exactly the replayed value
    logged_lr = logs.learning_rate.get(comparison.step)
    lr_rel = None
    if logged_lr is not None and math.isfinite(logged_lr):
        lr_rel = _relative(abs(replayed.learning_rate - logged_lr), logged_lr)
    return replace(
        comparison,
        logged_grad_norm=logged_grad,
        grad_norm_rel_diff=grad_rel,
        logged_learning_rate=logged_lr,
        learning_rate_rel_diff=lr_rel,
    )


def _relative(abs_diff: float, reference: float) -> float:
    if not math.isfinite(abs_diff):
        return math.inf
    if reference == 0.0:
        return 0.0 if abs_diff == 0.0 else math.inf
    return abs_diff / abs(reference)


def _bit_exact(expected: float, logged: float, decimals: int | None) -> bool:
    if expected == logged or float(np.float32(expected)) == logged:
        return True
    return decimals is not None and round(expected, decimals) == logged


def _loss_within(comparison: StepComparison, decimals: int | None) -> bool:
    assert comparison.abs_diff is not None and comparison.rel_diff is not None
    if comparison.bit_exact or comparison.rel_diff <= REPRODUCED_REL_TOL:
        return True
    if decimals is None:
        return False
    # The log kept `decimals` digits: half a unit of the last one is what rounding alone explains.
    rounding = 0.5 * 10.0**-decimals * (1 + 1e-9)
    return comparison.abs_diff <= rounding + REPRODUCED_REL_TOL * abs(comparison.logged_loss)


def _mismatched(comparison: StepComparison, decimals: int | None) -> bool:
    """The issue's criterion: the logged loss is not reproduced (grad norms are judged apart)."""
    if comparison.status == MISMATCH_NONFINITE:
        return True
    return comparison.status == COMPARED and not _loss_within(comparison, decimals)


def _fidelity(
    comparisons: list[StepComparison],
    decimals: int | None,
    conditions: ReplayConditions,
    steps: Sequence[ReplayStep],
) -> Fidelity:
    compared = [c for c in comparisons if c.status == COMPARED]
    agreed = [c for c in comparisons if c.status == NONFINITE_AGREED]
    mismatched = [c.step for c in comparisons if _mismatched(c, decimals)]
    by_step = {s.step: s for s in steps}
    grad_abs: list[float] = []
    grad_rel: list[float] = []
    for c in compared:
        replayed_grad = by_step[c.step].grad_norm
        if c.logged_grad_norm is None or c.grad_norm_rel_diff is None or replayed_grad is None:
            continue
        grad_rel.append(c.grad_norm_rel_diff)
        if math.isfinite(c.logged_grad_norm):
            grad_abs.append(abs(c.logged_grad_norm - replayed_grad))
    windows = [c.window[1] - c.window[0] + 1 for c in comparisons if c.status != SKIPPED]
    reproduced = bool(compared or agreed) and not mismatched
    grad_reproduced = all(r <= GRAD_NORM_REL_TOL for r in grad_rel) if grad_rel else None
    fidelity = Fidelity(
        compared_steps=len(compared),
        max_abs_loss_diff=max((c.abs_diff or 0.0 for c in compared), default=None),
        max_rel_loss_diff=max((c.rel_diff or 0.0 for c in compared), default=None),
        reproduced=reproduced,
        tolerance=REPRODUCED_REL_TOL,
        bit_exact_steps=sum(1 for c in compared if c.bit_exact),
        max_abs_grad_norm_diff=max(grad_abs, default=None),
        max_rel_grad_norm_diff=max(grad_rel, default=None),
        grad_norm_reproduced=grad_reproduced,
        nonfinite_agreed_steps=len(agreed),
        mismatched_steps=tuple(mismatched),
        first_mismatch_step=mismatched[0] if mismatched else None,
        logging_window=max(windows, default=1),
        logged_decimals=decimals,
    )
    if reproduced:
        return fidelity
    reasons = likely_reasons(comparisons, fidelity.first_mismatch_step, conditions, steps)
    return replace(fidelity, reasons=tuple(reasons))
