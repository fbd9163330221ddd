"""lr_jumps finds exactly what the rule, judged one point at a time, finds."""

from __future__ import annotations

import numpy as np
import pytest

from tscope.analyzers.explainers.learning_rate import (
    LR_JUMP_MIN_RELATIVE,
    LR_JUMP_SLOPE_MULTIPLE,
    LrJump,
    lr_jumps,
    print_quantum,
)

KINDS = ("warmup_cosine", "step_decay", "planted_jumps", "rounded", "random")


def lr_jumps_loop(steps: np.ndarray, lrs: np.ndarray) -> list[LrJump]:
    """The rule one point at a time, in order: the reference for the vectorized one. The change
    into a jump is left out of the slope window, except for the point right after it."""
    jumps: list[LrJump] = []
    quantum = print_quantum(lrs)
    for i in range(2, lrs.size):
        jumped = {jump.index for jump in jumps}
        if i - 1 in jumped:
            jumped = set()
        previous, earlier = lrs[i - 1], lrs[i - 2]
        if not (np.isfinite(lrs[i]) and np.isfinite(previous) and np.isfinite(earlier)):
            continue
        gap = (steps[i] - steps[i - 1]) / max(steps[i - 1] - steps[i - 2], 1)
        predicted = previous + (previous - earlier) * gap
        slopes = np.array(
            [0.0 if j in jumped else abs(lrs[j] - lrs[j - 1]) for j in range(max(1, i - 3), i)]
        )
        typical = float(slopes.max()) * max(gap, 1.0) if slopes.size else 0.0
        relative = abs(lrs[i] / previous - 1.0) if previous else float("inf")
        residual = abs(lrs[i] - predicted)
        one_unit = abs(lrs[i] - previous) <= quantum * (1 + 1e-9)  # a printed digit's rounding
        if (
            relative >= LR_JUMP_MIN_RELATIVE
            and residual > LR_JUMP_SLOPE_MULTIPLE * typical
            and not one_unit
        ):
            jumps.append(LrJump(i, int(steps[i]), float(previous), float(lrs[i])))
    return jumps


def schedule(kind: str, n: int, rng: np.random.Generator) -> np.ndarray:
    position = np.arange(n) / n
    warmup = rng.uniform(0.01, 0.2)
    base = 3e-4 * np.minimum(position / warmup, 1.0)
    if kind == "warmup_cosine":
        return base * np.where(position < warmup, 1.0, 0.5 * (1 + np.cos(np.pi * position)))
    if kind == "step_decay":
        return 1e-3 * 0.1 ** np.floor(position * int(rng.integers(1, 5)))
    if kind == "planted_jumps":
        lrs = base.copy()
        for at in rng.integers(3, n, 4):
            lrs[at:] *= rng.choice([0.1, 0.5, 2.0, 10.0])
        return lrs
    if kind == "rounded":
        return np.round(base, 6)  # logged LRs are rounded: flat runs, then a step
    return rng.lognormal(-8.0, 1.0, n)  # no structure at all


def steps_for(n: int, rng: np.random.Generator) -> np.ndarray:
    gaps = rng.choice([1, 1, 1, 2, 5, 10, 100], n)  # uneven logging, as after a resume or eval
    return np.cumsum(gaps).astype(np.int64)


def with_holes(lrs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
    holed = lrs.copy()
    count = int(rng.integers(0, 6))
    holed[rng.integers(0, lrs.size, count)] = rng.choice([np.nan, np.inf, 0.0], count)
    return holed


@pytest.mark.parametrize("seed", range(10))
@pytest.mark.parametrize("kind", KINDS)
def test_vectorized_lr_jumps_match_the_loop(kind: str, seed: int) -> None:
    rng = np.random.default_rng([seed, KINDS.index(kind)])
    n = int(rng.integers(3, 400))
    steps = steps_for(n, rng)
    lrs = with_holes(schedule(kind, n, rng), rng)
    with np.errstate(all="ignore"):  # the loop warns on inf - inf in its slope window
        expected = lr_jumps_loop(steps, lrs)
    assert lr_jumps(steps, lrs) == expected


def test_a_planted_jump_is_found_where_the_loop_finds_it() -> None:
    steps = np.arange(1, 1001, dtype=np.int64)
    lrs = np.minimum(steps / 100, 1.0) * 3e-4
    lrs[600:] *= 4.0
    lrs[300] = np.nan
    found = lr_jumps(steps, lrs)
    assert found == lr_jumps_loop(steps, lrs)
    assert [(jump.index, jump.step) for jump in found] == [(600, 601)]


@pytest.mark.parametrize("n", [0, 1, 2, 3])
def test_short_schedules(n: int) -> None:
    steps = np.arange(n, dtype=np.int64)
    lrs = np.array([1e-3, 1e-3, 5e-3][:n])
    assert lr_jumps(steps, lrs) == lr_jumps_loop(steps, lrs)


def test_a_jump_soon_after_a_step_decay_drop_is_still_a_jump() -> None:
    # bench/ood run ood13 (Trainer Llama, logging_steps 5, step decay ×0.1 then a planted ×11.04
    # at step 119): the drop at 105, three logged points before the jump, hid it when the
    # change into a jump point counted as the schedule's slope.
    steps = np.arange(5, 171, 5, dtype=np.int64)
    lrs = np.where(steps < 105, 1.339e-3, 1.339e-4)
    lrs = np.where(steps >= 120, lrs * 11.04, lrs)
    lrs = np.where(steps >= 140, lrs * 0.1, lrs)
    found = [(jump.step, round(jump.factor, 2)) for jump in lr_jumps(steps, lrs)]
    assert found == [(105, 0.1), (120, 11.04), (140, 0.1)]
    assert lr_jumps(steps, lrs) == lr_jumps_loop(steps, lrs)


@pytest.mark.parametrize(
    ("second", "factor"),
    [(10.0, 10.0), (2000.0, 2000.0)],
    ids=["x10-then-x10", "drop-to-0.01x-then-x20-above"],
)
@pytest.mark.parametrize("every", [1, 5])
def test_a_second_jump_right_after_the_first_is_still_a_jump(
    second: float, factor: float, every: int
) -> None:
    """Two breaks on consecutive logged points: a ×10 staircase, or an LR that drops to 1% for
    one point and then lands 20× above the schedule. The second is a jump of its own (main found
    it); not judging the point after a jump hid it."""
    steps = np.arange(0, 300, every, dtype=np.int64)
    lrs = 1e-3 * (1 - steps / 600)
    at = int(np.searchsorted(steps, 150))
    lrs[at:] *= 10.0 if second == 10.0 else 0.01
    lrs[at + 1 :] *= second
    found = {jump.step: jump.factor for jump in lr_jumps(steps, lrs)}
    assert found.get(int(steps[at + 1]), 0.0) > 0.9 * factor, found
    assert lr_jumps(steps, lrs) == lr_jumps_loop(steps, lrs)
