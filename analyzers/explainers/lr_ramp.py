"""lr_ramp: the logged learning rate climbs, after its warm-up, past the peak the warm-up reached.

A schedule rises only while it warms up (a linear, exponential or re-started warm-up), and every
legitimate shape after that — cosine or linear decay, constant, warm-up–stable–decay,
inverse-sqrt, cosine with warm restarts, a cyclic (triangular) schedule, the re-warm-up of a
resumed run — stays at or below the peak its first warm-up reached: restarts and cycles climb back
to that peak, not beyond. A smooth climb well past it, point after point, is a schedule bug (a
multiplier compounding each step, a mis-set `lr_lambda`, a scheduler stepped too often) and is
visible in the LR before the loss reacts. A climb in one logged interval is a jump
(`lr_schedule_jump`, learning_rate.py), not a ramp.

The finding's step is the ramp's start (the first point above the low it climbed from); its
evidence holds where it passed RAMP_MIN_FACTOR× and 2× the warm-up's peak, its growth per step,
and where the loss reacted (the lead from the start).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.divergence import loss_rise
from tscope.analyzers.explainers.spikes import is_notable
from tscope.analyzers.signals import fmt, loss_series, primary_loss
from tscope.model import Finding
from tscope.model.categories import Category
from tscope.model.metric_names import LEARNING_RATE

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
# Confidence that a ramp finding names the run's cause: Laplace's estimate (k + 1) / (n + 2) of
# the rule's precision where it fired, k = n = 8 dev ramps (0 firings on healthy runs): 0.9.
RAMP_CONFIDENCE = 0.9


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
        return None
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
    doubled = np.flatnonzero(lrs[low:] >= 2 * peak)
    span = max(int(steps[cross] - steps[low]), 1)
    return LrRamp(
        peak_step=int(steps[peak_index]),
        peak_lr=peak,
        low_step=int(steps[low]),
        low_lr=float(lrs[low]),
        start_step=int(steps[low + 1]),
        cross_step=int(steps[cross]),
        double_step=int(steps[low + int(doubled[0])]) if doubled.size else None,
        top_step=int(steps[top]),
        top_lr=float(lrs[top]),
        rising_points=top - low,
        growth_per_step=float((lrs[cross] / lrs[low]) ** (1 / span)),
    )


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
            "(evidence: start, where it passed 1.25× and 2× the peak, growth per step, the loss's lead)",
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
    message = (
        f"The learning rate ramped up past its warm-up peak ({fmt(ramp.peak_lr)} at step "
        f"{ramp.peak_step}): from step {ramp.start_step} it grew ×{ramp.growth_per_step:.3f} per "
        f"step for {ramp.rising_points} logged points, passing {RAMP_MIN_FACTOR:g}× the peak at "
        f"step {ramp.cross_step}{doubled}, up to {fmt(ramp.top_lr)} (×{fmt(ramp.factor)}) at "
        f"step {ramp.top_step}. A schedule rises only while warming up; restarts and cycles come "
        "back to the warm-up peak, not beyond."
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
        confidence=RAMP_CONFIDENCE,
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
        threshold=(
            f"after the warm-up, LR > {RAMP_MIN_FACTOR:g}× the warm-up's peak, climbing over ≥ "
            f"{RAMP_MIN_RISING_POINTS} consecutive rising logged points with no interval "
            f"carrying > {RAMP_MAX_INTERVAL_SHARE:.0%} of the rise"
        ),
    )
