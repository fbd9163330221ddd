"""loss_scale_collapse: fp16 dynamic loss scaling halving again and again, skipping steps."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.divergence import loss_rise
from tscope.analyzers.signals import fmt, loss_series, primary_loss
from tscope.model import Finding, Run
from tscope.model.categories import Category
from tscope.model.metric_names import GRAD_NORM, LOSS_SCALE, SKIPPED_STEPS

# GradScaler halves the scale on every overflow and doubles it after 2,000 clean steps (PyTorch
# amp/grad_scaler.py defaults; DeepSpeed: loss_scale_window 1000). Healthy fp16 runs halve now and
# then and grow back. This many halvings in a row without any growth is a collapse in progress...
CONSECUTIVE_HALVINGS = 5
# ...and a scale at or below 1 means fp16 gradients underflow: training has effectively stopped.
MIN_HEALTHY_SCALE = 1.0
# Overflow/skip events (DeepSpeed OVERFLOW lines, Megatron skipped iterations) in one run.
MANY_SKIPPED_STEPS = 10
# ...or, counted from the scale's halvings and non-finite gradient norms, at least that many and
# this share of the steps judged: a healthy GradScaler skips once per growth interval (2,000
# steps: 0.05%; DeepSpeed's window of 1,000: 0.1%). A planted-cause hunt (session 25) found a
# run with growth_interval=1 skipping 190 of 383 steps read as healthy.
FREQUENT_SKIPS = 0.01
# A scaler started above what the gradients allow halves on each of the first steps until it
# fits: Megatron-LM starts at 2^32 (--initial-loss-scale), DeepSpeed at 2^initial_scale_power
# (often 16 to 32). Halvings that begin at the first logged scale and stop above
# MIN_HEALTHY_SCALE are that calibration, not a collapse (a healthy plain-loop GradScaler run
# started at 2^32 halved 15 times to 2^17 and was warned before this).


class LossScaleExplainer:
    name = "loss_scale"
    categories: tuple[str, ...] = ("loss_scale_collapse",)
    defines = (
        Category(
            "loss_scale_collapse",
            "cause",
            "critical",
            "logs",
            "fp16 loss-scale collapse (overflowing gradients)",
            "the fp16 loss scale collapses (repeated overflows, skipped steps)",
            story_signal="loss_scale",
        ),
    )

    def run(self, evidence: Evidence) -> list[Finding]:
        run = evidence.run
        skipped = run.events_of("skipped_step") + run.events_of("overflow")
        if not run.has(LOSS_SCALE) and len(skipped) < MANY_SKIPPED_STEPS:
            return []
        steps, scales = run.series(LOSS_SCALE)
        finite = np.isfinite(scales) & (scales > 0)
        steps, scales = steps[finite], scales[finite]
        ratios = scales[1:] / scales[:-1] if scales.size > 1 else np.empty(0)
        calibrated = _start_calibration(scales, ratios)
        if calibrated:
            # the start's halvings are the scaler finding its level; judge what follows
            skipped = [e for e in skipped if e.step > int(steps[calibrated])]
        # A streak is reductions with no growth between them (steps at an unchanged scale may
        # separate them).
        streak: list[int] = []  # the indices of the current streak's reductions
        longest_streak: list[int] = []
        for index, ratio in enumerate(ratios[calibrated:], start=calibrated):
            if ratio < 1.0:
                streak.append(index + 1)
                if len(streak) > len(longest_streak):
                    longest_streak = streak  # the same list: it grows on while it is the longest
            elif ratio > 1.0:
                streak = []
        longest = len(longest_streak)
        streak_end = longest_streak[-1] if longest_streak else 0
        minimum = float(scales.min()) if scales.size else None
        # A scale that is 1 from the start is bf16/fp32 (no dynamic scaling), not a collapse.
        collapsed = (
            minimum is not None and minimum <= MIN_HEALTHY_SCALE and float(scales.max()) > minimum
        )
        # every record of skips (events, halvings, non-finite gradient norms), past the start-up
        last_step = int(steps[-1]) if steps.size else max((e.step for e in skipped), default=0)
        calibration_skips = (
            skipped_updates_through(run, int(steps[calibrated])) if calibrated else 0
        )
        skipped_count = max(
            len(skipped), skipped_updates_through(run, last_step) - calibration_skips
        )
        judged_from = int(steps[calibrated]) if calibrated else int(steps[0]) if steps.size else 0
        span = max(last_step - judged_from, 1)
        frequent = skipped_count >= MANY_SKIPPED_STEPS and skipped_count >= FREQUENT_SKIPS * span
        if not (
            collapsed
            or longest >= CONSECUTIVE_HALVINGS
            or len(skipped) >= MANY_SKIPPED_STEPS
            or frequent
        ):
            return [_calibration_note(steps, scales, calibrated)] if calibrated else []
        first_skip = min((event.step for event in skipped), default=None)
        step = int(steps[streak_end]) if longest else first_skip
        # Where the collapse began: the streak's first reduction or the first skipped step of
        # the collapse, each leaving out ordinary overflows set apart before it (a blind set's
        # Megatron-style log, session 27: one overflow at 194, then a skip and a halving every
        # step from 230; dated 194 by the run's first skip).
        began = [int(steps[_collapse_start(longest_streak)])] if longest else []
        skipped_steps = sorted({event.step for event in skipped})
        began += [_collapse_start(skipped_steps)] if skipped_steps else []
        began_step = min(began) if began else step
        broke_at = _loss_broke_before(evidence, began_step)
        message = (
            f"The fp16 loss scale fell {longest} times in a row (to {fmt(minimum)})"
            f" and {skipped_count} steps were skipped for overflow"
            + (" after the scaler's start-up calibration" if calibrated else "")
            + ": gradients overflow fp16 "
            "persistently."
        )
        if frequent and not (collapsed or longest >= CONSECUTIVE_HALVINGS):
            message = (
                f"{skipped_count} of the {span} steps from step {judged_from} were skipped for "
                f"overflow ({skipped_count / span:.0%})"
                + (" after the scaler's start-up calibration" if calibrated else "")
                + f"; the loss scale went {fmt(float(scales[calibrated:].min()))}–"
                f"{fmt(float(scales[calibrated:].max()))}, growing and "
                "overflowing again and again: those steps trained nothing (a growth interval "
                "too short, or gradients at the edge of fp16's range)."
            )
        if broke_at is not None:
            message += (
                f" It began at step {began_step}, when the loss had already broken (from step "
                f"{broke_at}): the overflows follow the blow-up (a model whose loss has broken "
                "sends gradients past fp16's range), so they do not explain it."
            )
        return [
            Finding(
                category="loss_scale_collapse",
                severity="info" if broke_at is not None else "critical" if collapsed else "warning",
                confidence=0.85 if collapsed else 0.7,
                # Dated where the collapse began (the planted-cause hunt's fp16 run: the scale
                # halved every step from 220; the finding said 239, where the streak ended).
                step=began_step,
                layer=None,
                message=message,
                evidence={
                    "consecutive_reductions": longest,
                    "min_loss_scale": minimum,
                    "max_loss_scale": float(scales.max()) if scales.size else None,
                    "skipped_or_overflow_steps": skipped_count,
                    "first_skipped_step": first_skip,
                    "began_step": began_step,
                    "loss_broke_at_step": broke_at,
                },
                suggestion=(
                    "Switch to bf16 if the hardware allows (BLOOM-176B did after failed fp16 runs), "
                    "or lower the LR / add an embedding LayerNorm."
                ),
                threshold=(
                    f"≥ {CONSECUTIVE_HALVINGS} reductions without growth, scale ≤ "
                    f"{MIN_HEALTHY_SCALE}, or ≥ {MANY_SKIPPED_STEPS} skipped steps (counted "
                    f"from halvings and non-finite norms: and ≥ {FREQUENT_SKIPS:.0%} of the steps)"
                ),
            )
        ]


def _loss_broke_before(evidence: Evidence, began_step: int | None) -> int | None:
    """The onset of a loss incident (a spike that had not recovered yet, or the rise that lasts
    to the end of the log) at or before `began_step`; None when the collapse came first. The loss
    at a step is measured before that step's backward pass, so an overflow at the onset step
    itself already follows the broken loss (BLOOM tr8b-104B's chronicles, ../shared/realdata:
    the loss jumped 2.67 -> 4.37 at step 17062, that step overflowed and the halvings followed)."""
    loss = primary_loss(evidence.run)
    if loss is None or began_step is None:
        return None
    onsets = [
        spike.onset_step
        for spike in evidence.spikes
        if spike.metric == loss
        and spike.onset_step <= began_step
        and (spike.end_step is None or spike.end_step >= began_step)
    ]
    steps, values = loss_series(evidence.run, loss)
    rise = loss_rise(steps, values)
    if rise is not None and int(steps[rise[0]]) <= began_step:
        onsets.append(int(steps[rise[0]]))
    return min(onsets) if onsets else None


def skipped_updates_through(run: Run, step: int) -> int:
    """How many optimizer updates up to `step` the log shows skipped for overflow.

    An fp16 step whose gradients overflow is skipped (no optimizer.step, so Adam's counter does
    not advance) and halves the loss scale; its gradient norm is logged as inf or nan. Each
    record sees the same skips, so this is the most any one of them shows, never their sum:
    skip/overflow events and skipped-iteration counters, halvings of the logged loss scale (a
    drop by 2^k between two logged points is k of them), non-finite gradient norms.
    """
    counts = [
        sum(
            1
            for kind in ("skipped_step", "overflow")
            for e in run.events_of(kind)
            if e.step <= step
        )
    ]
    if run.has(SKIPPED_STEPS):
        steps, values = run.series(SKIPPED_STEPS)
        # a count is at most the steps logged so far: a crafted 1e308 summed to inf (red team,
        # session 28)
        kept = values[(steps <= step) & np.isfinite(values)].clip(0, max(step, 1))
        # A running total (never falling, as a loop printing its scaler's skip count) is read
        # as its last value; per-interval counts (Megatron's) are summed.
        cumulative = kept.size > 1 and bool(np.all(np.diff(kept) >= 0))
        total = kept[-1] if cumulative else min(float(kept.sum()), max(step, 1))
        counts.append(int(total) if kept.size else 0)
    if run.has(LOSS_SCALE):
        steps, scales = run.series(LOSS_SCALE)
        scales = scales[(steps <= step) & np.isfinite(scales) & (scales > 0)]
        # a ratio that underflows to 0 (65536 -> 5e-324) counts as the most halvings a float
        # can hold, not as -log2(0) = inf
        drops = np.maximum(scales[1:] / scales[:-1], np.finfo(float).tiny)
        drops = drops[drops < 1.0]
        counts.append(int(np.maximum(np.rint(-np.log2(drops)), 1).sum()) if drops.size else 0)
    if run.has(GRAD_NORM):
        steps, norms = run.series(GRAD_NORM)
        counts.append(int(np.count_nonzero(~np.isfinite(norms[steps <= step]))))
    return max(counts)


def _start_calibration(scales: np.ndarray, ratios: np.ndarray) -> int:
    """How many of the first logged scale changes are the start-up calibration: the halvings
    from the first logged scale on, when they stop before the log ends and above
    MIN_HEALTHY_SCALE (0 when the log does not start so)."""
    count = 0
    while count < ratios.size and ratios[count] < 1.0:
        count += 1
    ended = count < ratios.size and scales[count] > MIN_HEALTHY_SCALE
    # Halvings, not logged drops: Megatron logs every 10 iterations, and its start from 2^32
    # shows as one drop of 2^7 between the first two logged scales (a blind set's healthy fp16
    # run, session 29, was warned "skipped 16 of 140 steps" for it).
    halvings = float(np.log2(scales[0] / scales[count])) if count else 0.0
    return count if halvings >= CONSECUTIVE_HALVINGS - 1e-9 and ended else 0


def _calibration_note(steps: np.ndarray, scales: np.ndarray, calibrated: int) -> Finding:
    first, settled = float(scales[0]), float(scales[calibrated])
    return Finding(
        category="loss_scale_collapse",
        severity="info",
        confidence=0.8,
        step=int(steps[calibrated]),
        layer=None,
        message=(
            f"The fp16 loss scale halved {round(np.log2(first / settled))} times from the start "
            f"({fmt(first)} → "
            f"{fmt(settled)} by step {int(steps[calibrated])}) and then held: the scaler "
            "calibrating its start-up value, with those first updates skipped. Not a collapse."
        ),
        evidence={
            "initial_loss_scale": first,
            "calibrated_loss_scale": settled,
            "calibration_halvings": round(float(np.log2(first / settled))),
            "calibrated_by_step": int(steps[calibrated]),
        },
        suggestion="Nothing to do; a lower initial scale would skip fewer of the first updates.",
        threshold=(
            f"≥ {CONSECUTIVE_HALVINGS} halvings from the first logged scale, ending above "
            f"{MIN_HEALTHY_SCALE}"
        ),
    )


def _collapse_start(reductions: list[int]) -> int:
    """Where a streak of reductions began: its first one, leaving out leading reductions set
    apart by more than twice the streak's typical spacing (the planted-cause hunt's fp16 run: one
    ordinary overflow at 206, then a halving every step from 220; a synthetic collapse halving
    every 5 steps from 301 began at 301)."""
    gaps = np.diff(reductions)
    if gaps.size == 0:
        return reductions[0]
    typical = float(np.median(gaps))
    start = len(reductions) - 1
    while start > 0 and gaps[start - 1] <= 2 * typical:
        start -= 1
    return reductions[start]
