"""lr_schedule_jump, lr_too_high, warmup_too_short: what the logged learning rate says.

The warm-up rule itself (when an instability counts against the warm-up) is
explainers/warmup_instability.py; the rule for a blow-up at the LR's peak is
explainers/lr_peak_instability.py.

lr_too_high / lr_too_low against the kind of training come from lr_config."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.lr_config import LR_TOO_LOW, lr_range_findings
from tscope.analyzers.explainers.lr_exhausted import lr_exhausted
from tscope.analyzers.explainers.lr_peak_instability import lr_too_high_at_peak
from tscope.analyzers.explainers.lr_rewarm import earlier_peak, schedule_restart
from tscope.analyzers.explainers.warmup_instability import warmup_too_short
from tscope.analyzers.lr_stairs import stair_starts
from tscope.analyzers.reach import LR_EFFECT_WINDOW_POINTS
from tscope.analyzers.signals import fmt, primary_loss
from tscope.analyzers.spike_judgement import is_notable
from tscope.analyzers.training_kind import untrained_level
from tscope.model import Finding, Run, Spike
from tscope.model.categories import Category
from tscope.model.metric_names import LEARNING_RATE

# A jump is a change the schedule's local shape does not predict: the residual against a linear
# extrapolation of the previous points exceeds this multiple of the schedule's recent per-point
# change (so the end of a linear warm-up, whose kink equals one step of the slope, is not a jump)...
LR_JUMP_SLOPE_MULTIPLE = 3.0
# ...and the LR moves by at least 25% in one logged interval (logged LRs are rounded, e.g. to
# four digits by Megatron, and smooth schedules move far less per step than this).
LR_JUMP_MIN_RELATIVE = 0.25
# A log that prints the LR to a few decimals (Composer's console logger: `f"{value:.4f}"`, so a
# cosine schedule near 2.4e-4 reads 0.0002, 0.0002, ..., 0.0003) moves in steps of one printed
# unit that are the rounding, not the schedule: a healthy run's 0.0002 → 0.0003 read as a ×1.5
# jump. A change of at most that unit is no jump (`print_quantum`: the largest power of ten
# every logged value is a multiple of, at most PRINT_DIGITS_MAX decimals, when the log also moves
# by exactly one unit at least PRINT_STEPS_MIN times: a smooth schedule seen through rounding). A
# constant LR of a round value (1e-4) that jumps to 3e-4 has no such steps: its jump stays one.
PRINT_DIGITS_MAX = 12
PRINT_STEPS_MIN = 2
# An upward jump back to the run's earlier peak (within this band of it), from below RESTART_FROM of
# it, is a warm restart (cosine with hard restarts, SGDR) when the loss does not react: info, not
# a warning. Measured (scripts/measure_lr_ramp.py, --train-synthetic and --bench-split dev): the hard
# restarts of the synthetic cosine-with-restarts runs land at 0.998–1.000× the earlier peak; the
# 16 planted dev LR jumps land at 1.117–34× it (none inside the band), so their recall is unchanged.
RESTART_PEAK_BAND = (0.95, 1.02)
RESTART_FROM = 0.5
# ...and it decays from there over its cycle. An LR that instead falls back by a jump, before
# the next rise, to within TRANSIENT_RETURN_FACTOR of where it was before it rose was a transient
# (a schedule bug), whatever level it touched: holdout8's trainer_gpt2-lr_jump_transient-85, ×6.15
# for 5 steps late in a cosine decay, landed at 1.0004× the warm-up's peak by chance and read as a
# restart (info) although it dropped ×0.15 back five points later. A cosine restart has no
# downward jump in its cycle (its decay is smooth: lr_jumps finds none).
TRANSIENT_RETURN_FACTOR = 2.0


@dataclass(frozen=True)
class LrJump:
    index: int
    step: int
    before: float
    after: float

    @property
    def factor(self) -> float:
        return self.after / self.before if self.before else float("inf")


def lr_jumps(steps: np.ndarray, lrs: np.ndarray) -> list[LrJump]:
    """Points whose LR departs from the schedule's local shape (see LR_JUMP_* above).

    Point i is judged against a linear extrapolation of points i-2 and i-1 (scaled by the step
    gaps) and the largest per-point change among the (up to) three intervals before it. A jump
    is a break of the schedule, not its shape, so the change into it is left out of the slope
    window of the points after it. (With every step logged a break three points back is rare; with
    the Trainer's `logging_steps` 5, a ×0.1 step-decay drop 15 steps before a planted ×11 jump hid
    it, bench/ood run ood13.) The point right after a jump keeps the break's change in its window:
    its extrapolation spans the break (without it a resumed run's re-warm-up read as a jump,
    ood17), yet a second break as large as the first (a ×10 then another ×10, a drop to ~0 then
    ×20 above the schedule) is still one. Points where i, i-1 or i-2 is not finite are skipped.

    Everything but the order-dependent part is computed over whole arrays; only the points that
    move by LR_JUMP_MIN_RELATIVE (a handful in a smooth schedule) are then walked in order: a
    10^4-point schedule is judged in about a millisecond.
    """
    lrs = np.asarray(lrs, dtype=np.float64)
    starts = stair_starts(lrs)  # one point per stair (lr_stairs.py)
    if starts is not None:
        return [
            LrJump(int(starts[jump.index]), jump.step, jump.before, jump.after)
            for jump in _schedule_breaks(np.asarray(steps)[starts], lrs[starts])
        ]
    return _schedule_breaks(steps, lrs)


def _schedule_breaks(steps: np.ndarray, lrs: np.ndarray) -> list[LrJump]:
    """lr_jumps on a series with one point per schedule value."""
    if lrs.size < 3:
        return []
    current, previous, earlier = lrs[2:], lrs[1:-1], lrs[:-2]
    step_gaps = np.diff(steps)
    # Non-finite points and a zero previous LR give inf/NaN here; the mask below drops them.
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        gap = step_gaps[1:] / np.maximum(step_gaps[:-1], 1)
        predicted = previous + (previous - earlier) * gap
        slopes = np.abs(np.diff(lrs))  # slopes[j]: the change into point j+1
        relative = np.where(previous != 0, np.abs(current / previous - 1.0), np.inf)
        residual = np.abs(current - predicted)
        finite = np.isfinite(current) & np.isfinite(previous) & np.isfinite(earlier)
    candidates = np.flatnonzero(finite & (relative >= LR_JUMP_MIN_RELATIVE))
    # Only a log with a candidate needs its print precision (most smooth schedules have none).
    quantum = print_quantum(lrs) if candidates.size else 0.0
    jumps: list[LrJump] = []
    broken: set[int] = set()  # points judged jumps
    for k in candidates.tolist():
        point = k + 2
        after_break = point - 1 in broken
        # The changes into points point-3 … point-1 (fewer at the start); a NaN among them
        # makes the max NaN and the point is not judged, as a non-finite neighbour is not.
        window = [
            0.0 if j in broken and not after_break else slopes[j - 1]
            for j in range(max(1, point - 3), point)
        ]
        typical = float(np.max(window)) * max(float(gap[k]), 1.0)
        one_unit = abs(float(current[k] - previous[k])) <= quantum * (1 + 1e-9)
        if residual[k] > LR_JUMP_SLOPE_MULTIPLE * typical and not one_unit:
            broken.add(point)
            jumps.append(LrJump(point, int(steps[point]), float(previous[k]), float(current[k])))
    return jumps


def print_quantum(values: np.ndarray) -> float:
    """The unit the values were printed in (see PRINT_DIGITS_MAX above), else 0: values logged
    at full precision, or round values that never move by one unit."""
    finite = values[np.isfinite(values)]
    if finite.size == 0 or np.abs(finite).max() == 0:
        return 0.0
    for digits in range(1, PRINT_DIGITS_MAX + 1):
        scaled = finite * 10.0**digits
        whole = np.round(scaled)
        if np.all(np.abs(scaled - whole) <= 1e-6 * np.maximum(np.abs(scaled), 1.0)):
            one_unit_steps = int(np.count_nonzero(np.abs(np.diff(whole)) == 1))
            return float(10.0**-digits) if one_unit_steps >= PRINT_STEPS_MIN else 0.0
    return 0.0


class LearningRateExplainer:
    name = "learning_rate"
    categories: tuple[str, ...] = (
        "lr_schedule_jump",
        "lr_too_high",
        "warmup_too_short",
        "lr_too_low",
    )
    defines = (
        Category(
            "lr_schedule_jump",
            "cause",
            "warning",
            "logs",
            "a learning-rate schedule jump",
            "the LR jumps between consecutive logged points (a schedule or resume bug)",
            story_signal="learning_rate",
        ),
        Category(
            "lr_too_high",
            "cause",
            "warning",
            "logs",
            "a learning rate too high for this run",
            "the loss climbs while the LR is at or near its peak",
            story_signal="learning_rate",
        ),
        Category(
            "warmup_too_short",
            "cause",
            "warning",
            "logs",
            "a warm-up too short for the peak learning rate",
            "the loss breaks during a short warm-up or with none (just after one: a note)",
            story_signal="learning_rate",
        ),
        LR_TOO_LOW,
    )

    def run(self, evidence: Evidence) -> list[Finding]:
        run = evidence.run
        if not run.has(LEARNING_RATE):
            return lr_range_findings(evidence, [])  # the configured LR may still be judged
        steps, lrs = run.series(LEARNING_RATE)
        resume_steps = {event.step for event in run.events_of("resume")}
        jumps = lr_jumps(steps, lrs)
        judged = [
            (jump, restart)
            for jump, restart in _with_restarts(steps, lrs, jumps)
            if jump.step not in resume_steps  # reported as resume_discontinuity instead
        ]
        findings = [
            schedule_restart(steps, lrs, jump) or _jump_finding(run, jump, evidence.spikes, restart)
            for jump, restart in judged
        ]
        # A blow-up in the effect window of an upward jump the schedule does not explain is the
        # jump's (lr_schedule_jump names it): the LR did not climb to it, it stepped.
        raised_by_jump = [
            (j.step, effect_end(run, j.step))
            for j, restart in judged
            if restart is None and j.factor > 1
        ]
        findings.extend(
            lr_range_findings(
                evidence, lr_too_high_at_peak(run, steps, lrs, evidence.spikes, raised_by_jump)
            )
        )
        # An instability in the effect window of an upward jump is the jump's, not the warm-up's.
        jump_effects = [(j.step, effect_end(run, j.step)) for j in jumps if j.factor > 1]
        findings.extend(
            warmup_too_short(
                run,
                steps,
                lrs,
                evidence.spikes,
                jump_effects,
                untrained_level(evidence.run, evidence.checkpoints),
            )
        )
        findings.extend(lr_exhausted(run, steps, lrs, print_quantum(lrs)))
        return findings


def incidents_after(run: Run, spikes: list[Spike], step: int) -> list[Spike]:
    """Loss spikes worth a warning (the impact rule: `is_notable`) starting at or within the
    effect window after `step`; an info-level bump is not an effect of the LR event."""
    loss = primary_loss(run)
    if loss is None:
        return []
    last = effect_end(run, step)
    return [
        s
        for s in spikes
        if s.metric == loss and step <= s.onset_step <= last and is_notable(run, s, spikes)
    ]


def effect_end(run: Run, step: int) -> int:
    """The last step of an LR event's effect window: LR_EFFECT_WINDOW_POINTS logged loss points
    after `step` (the step itself when there is no loss)."""
    loss = primary_loss(run)
    if loss is None:
        return step
    loss_steps, _ = run.series(loss)
    if loss_steps.size == 0:
        return step
    position = int(np.searchsorted(loss_steps, step))
    return int(loss_steps[min(position + LR_EFFECT_WINDOW_POINTS, loss_steps.size - 1)])


def _with_restarts(
    steps: np.ndarray, lrs: np.ndarray, jumps: list[LrJump]
) -> list[tuple[LrJump, tuple[int, float] | None]]:
    """Each jump with the earlier peak it returns to when it is a warm restart (`_restart_peak`):
    the run's earlier maximum, or the maximum before the first upward jump that is no restart,
    since an LR raised by such a jump is no level a restart returns to (a ×15 transient planted
    between two hard restarts of a cosine-with-restarts schedule made the second restart, back to
    the warm-up's peak, land at 0.34× the earlier maximum, and it read as a schedule bug: bench/ood
    run ood01). Either peak will do, so this only ever turns a jump into a restart."""
    judged: list[tuple[LrJump, tuple[int, float] | None]] = []
    until = lrs.size
    for position, jump in enumerate(jumps):
        restart = _restart_peak(steps, lrs, jump)
        if restart is None and until < jump.index:
            restart = _restart_peak(steps, lrs, jump, until)
        if restart is not None and _falls_back(jump, jumps[position + 1 :]):
            restart = None
        judged.append((jump, restart))
        if jump.factor > 1 and restart is None:
            until = min(until, jump.index)
    return judged


def _falls_back(rise: LrJump, later: list[LrJump]) -> bool:
    """A downward jump, before the next rise, back to within TRANSIENT_RETURN_FACTOR of the LR
    before `rise`: the rise was a transient, not a warm restart."""
    for jump in later:
        if jump.factor > 1:
            return False
        if jump.after <= TRANSIENT_RETURN_FACTOR * rise.before:
            return True
    return False


def _restart_peak(
    steps: np.ndarray, lrs: np.ndarray, jump: LrJump, until: int | None = None
) -> tuple[int, float] | None:
    """(step, LR) of the earlier peak (before index `until`, the jump's own by default) an upward
    jump returns to, as a warm restart does; None when the jump is no restart (RESTART_* above)."""
    found = earlier_peak(steps, lrs, jump.index if until is None else until)
    if jump.factor <= 1 or found is None:
        return None
    peak = found[1]
    low, high = RESTART_PEAK_BAND
    if not (low * peak <= jump.after <= high * peak and jump.before < RESTART_FROM * peak):
        return None
    return found


def _jump_finding(
    run: Run, jump: LrJump, spikes: list[Spike], restart: tuple[int, float] | None = None
) -> Finding:
    followed = incidents_after(run, spikes, jump.step) if jump.factor > 1 else []
    upward = jump.factor > 1
    direction = "up" if upward else "down"
    message = (
        f"The learning rate jumped {direction} ×{fmt(jump.factor)} at step {jump.step} "
        f"({fmt(jump.before)} → {fmt(jump.after)}), a change the schedule's shape does not explain."
    )
    if restart is not None and not followed:
        return _restart_finding(jump, restart)
    if followed:
        message += (
            f" {followed[0].metric} spiked {_steps_text(followed[0].onset_step - jump.step)} later "
            f"(peak at step {followed[0].peak_step})."
        )
    return Finding(
        category="lr_schedule_jump",
        severity="warning" if upward else "info",
        confidence=0.85 if followed else (0.6 if upward else 0.4),
        step=jump.step,
        layer=None,
        message=message,
        evidence={
            "lr_before": jump.before,
            "lr_after": jump.after,
            "factor": jump.factor,
            "followed_by_spike": followed[0].id if followed else None,
        },
        suggestion=(
            "Check the scheduler (a custom lambda, a restart or a mis-set milestone) and the "
            "resume logic; restart from the checkpoint before this step with the intended LR."
            if upward
            else "A step decay is fine if intended; otherwise check the scheduler's milestones."
        ),
        spike_id=followed[0].id if followed else None,
        threshold=(
            f"≥ {LR_JUMP_MIN_RELATIVE:.0%} change in one logged interval and > "
            f"{LR_JUMP_SLOPE_MULTIPLE}× the schedule's recent per-step change"
        ),
    )


def _restart_finding(jump: LrJump, restart: tuple[int, float]) -> Finding:
    peak_step, peak = restart
    return Finding(
        category="lr_schedule_jump",
        severity="info",
        confidence=0.4,
        step=jump.step,
        layer=None,
        message=(
            f"The learning rate went back up ×{fmt(jump.factor)} at step {jump.step} "
            f"({fmt(jump.before)} → {fmt(jump.after)}), to the peak it had at step {peak_step} "
            f"({fmt(peak)}), and the loss did not react: the shape of a schedule with warm "
            "restarts (cosine with restarts, SGDR). If no restart is configured, check the "
            "scheduler's state at a resume."
        ),
        evidence={
            "lr_before": jump.before,
            "lr_after": jump.after,
            "factor": jump.factor,
            "followed_by_spike": None,
            "returns_to_peak_step": peak_step,
            "returns_to_peak_lr": peak,
        },
        suggestion="Nothing to do if the schedule restarts by design.",
        threshold=(
            f"an upward jump from below {RESTART_FROM:.0%} of the run's earlier peak back to "
            f"{RESTART_PEAK_BAND[0]:g}–{RESTART_PEAK_BAND[1]:g}× that peak is a restart"
        ),
    )


def _steps_text(count: int) -> str:
    return f"{count} step" if count == 1 else f"{count} steps"
