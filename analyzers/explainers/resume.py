"""resume_discontinuity: a loss or learning-rate jump right at a point where the run resumed."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.baseline import BASELINE_WINDOW_POINTS, difference_sigma
from tscope.analyzers.explainers.learning_rate import LR_JUMP_MIN_RELATIVE
from tscope.analyzers.impact import MIN_WARNING_EXCESS, UNTRAINED_MIN_POINTS, back_at_initial
from tscope.analyzers.lr_movement import lr_moved_up
from tscope.analyzers.resume_window import RESUME_CHECK_POINTS
from tscope.analyzers.signals import fmt, primary_loss
from tscope.analyzers.training_kind import Vocabulary, vocabulary
from tscope.model import Finding, Run, RunEvent
from tscope.model.categories import Category
from tscope.model.metric_names import LEARNING_RATE
from tscope.model.run import (
    EPOCH_AFTER_KEY,
    EPOCH_BEFORE_KEY,
    RELOGGED_KEY,
    STEPS_AGAIN_KEY,
)

# The loss right after a resume is compared with the points before it; the same bar as a spike.
RESUME_LOSS_SIGMA = 6.0
# The level before a resume and the noise it is compared with: the median of the last LEVEL_POINTS
# logged losses, and σ from the first differences of the baseline window (a trend does not
# inflate it). A window median and its MAD, as before, put a run resumed early, while its loss
# still fell fast (7.9 → 6.4 over the window), at a level of 7.2 ± 0.8: lost weights (back to
# 10.2, the first logged loss) read 3.8 σ and 0.78 of the gain given back, under both bars
# (bench/synthetic_logs.py, a restart from scratch 40% into a 730-step run).
LEVEL_POINTS = 5
# ...and the jump is a problem only when it is also ≥ MIN_WARNING_EXCESS over that level, the one
# severity rule's floor (analyzers/impact.py): a healthy EMA-smoothed log restarted from a
# checkpoint re-logged its steps 0.7% higher, 6.1 σ of its smoothed step-to-step noise (1 of 300
# healthy synthetic logs). On the dev split, resumes with the weights lost jump +41–65%; with the
# optimizer or the scheduler lost −5% … +11%, which the LR and checkpoint evidence name instead.


# A resume the log does not record (the steps run on, nothing rewound: a plain loop that appends
# to its log, a Trainer whose restored state carries the history on) is looked for at the saved
# checkpoints: the loss back at the untrained level from the first logged points after one
# (back_at_initial, the same test as at a recorded resume) is weights lost there. Checkpoints
# within this many steps of a recorded resume are that resume's.
UNMARKED_RESUME_SLACK = 1


class ResumeExplainer:
    name = "resume"
    categories: tuple[str, ...] = ("resume_discontinuity",)
    defines = (
        Category(
            "resume_discontinuity",
            "cause",
            "warning",
            "logs",
            "a faulty resume from a checkpoint",
            "the loss, LR or step counter breaks at a resume point",
            story_signal="resume",
        ),
    )

    def run(self, evidence: Evidence) -> list[Finding]:
        run = evidence.run
        resumes = run.events_of("resume")
        vocab = vocabulary(run, evidence.checkpoints)
        findings = [_check(run, event, vocab) for event in resumes]
        if evidence.checkpoints is not None:
            marked = [event.step for event in resumes]
            for step in sorted(set(evidence.checkpoints.steps)):
                if any(abs(step - resumed) <= UNMARKED_RESUME_SLACK for resumed in marked):
                    continue
                unmarked = _unmarked_weights_lost(run, step, vocab)
                if unmarked is not None:
                    findings.append(unmarked)
                    break  # the first one: the training after it starts over
        return findings


def _lr_change(run: Run, event: RunEvent) -> tuple[float, float, float] | None:
    """(LR last logged before the resume, first after it, what it should have been there).
    What it should have been: the LR the earlier attempt logged at that same step, where the log
    was rewound over it (the resume event's RELOGGED_KEY number: a restored scheduler logs it
    again); else the last two LRs before the resume extrapolated linearly to that step, so that a
    resume inside a warm-up (the LR ×2 per logged point at its start) is not a jump, or the last
    LR before when fewer than two were logged or the extrapolation is not above 0."""
    steps, lrs = run.series(LEARNING_RATE)
    finite = np.isfinite(lrs)
    steps, lrs = steps[finite], lrs[finite]
    step = event.step
    before = np.flatnonzero(steps < step)
    after = np.flatnonzero(steps >= step)
    if before.size == 0 or after.size == 0:
        return None
    last, first_after = int(before[-1]), int(after[0])
    logged_before = event.numbers.get(RELOGGED_KEY + LEARNING_RATE)
    if logged_before is not None and int(steps[first_after]) == step:
        return float(lrs[last]), float(lrs[first_after]), float(logged_before)
    expected = float(lrs[last])
    if before.size >= 2:
        previous = int(before[-2])
        slope = (lrs[last] - lrs[previous]) / float(steps[last] - steps[previous])
        trend = float(lrs[last] + slope * float(steps[first_after] - steps[last]))
        expected = trend if trend > 0 else expected
    return float(lrs[last]), float(lrs[first_after]), expected


def level_before(before: np.ndarray) -> float:
    """The loss level just before the resume: the median of its last LEVEL_POINTS finite points
    (a median over the whole baseline window sits above a loss still falling fast)."""
    finite = before[np.isfinite(before)]
    return float(np.median(finite[-LEVEL_POINTS:])) if finite.size else float("nan")


def _loss_jump(run: Run, step: int) -> tuple[float, float, float] | None:
    """(baseline, max after resume, robust sigmas) for the loss around the resume step."""
    loss = primary_loss(run)
    if loss is None:
        return None
    steps, values = run.series(loss)
    before = values[steps < step][-BASELINE_WINDOW_POINTS:]
    after = values[steps >= step][:RESUME_CHECK_POINTS]
    if before.size < 3 or after.size == 0:
        return None
    baseline, sigma = level_before(before), difference_sigma(before)
    worst = float(np.max(np.where(np.isfinite(after), after, np.inf)))
    return baseline, worst, (worst - baseline) / sigma


def _weights_lost(run: Run, step: int, vocab: Vocabulary | None) -> tuple[float, float, str] | None:
    """(untrained level, loss after the resume, how it is known) when the loss in the first
    points after the resume is back at the run's initial level (≈ ln V: a model that knows
    nothing) for RESUME_CHECK_POINTS points, after the run had fallen well below it. The
    vocabulary is the config's or the token embedding's rows in the checkpoints; without it the
    run's first logged loss stands for the untrained level."""
    loss = primary_loss(run)
    if loss is None:
        return None
    steps, values = run.series(loss)
    finite = np.isfinite(values)
    before = values[(steps < step) & finite]
    after = values[(steps >= step) & finite][:UNTRAINED_MIN_POINTS]
    if before.size < 3 or after.size < UNTRAINED_MIN_POINTS:
        return None
    if vocab is not None:
        initial, how = float(np.log(vocab.size)), f" = ln({vocab.source})"
    else:
        initial, how = float(before[0]), ", its first logged loss"
    if not back_at_initial(initial, level_before(before), after):
        return None
    return initial, float(np.max(after)), how


def _unmarked_weights_lost(
    run: Run, checkpoint_step: int, vocab: Vocabulary | None
) -> Finding | None:
    """Weights lost at a resume from the checkpoint saved at `checkpoint_step` that the log does
    not record. The first loss computed with the resumed weights is logged at the checkpoint's
    step (nanoGPT and Lightning count from 0) or the one after (the Trainer and most loops log
    update k's loss at step k): the return to the untrained level is looked for from either, and
    the points just before must still be at the trained level, with no LR jump or climb (a
    divergence already under way is not a resume)."""
    loss = primary_loss(run)
    if loss is None:
        return None
    steps, values = run.series(loss)
    finite = np.isfinite(values)
    for first in (checkpoint_step, checkpoint_step + 1):
        lost = _weights_lost(run, first, vocab)
        if lost is not None:
            break
    else:
        return None
    before = values[(steps < first) & finite]
    level = level_before(before)
    settled = before[-BASELINE_WINDOW_POINTS - LEVEL_POINTS : -LEVEL_POINTS]
    disturbed = settled.size >= LEVEL_POINTS and float(np.max(before[-LEVEL_POINTS:])) - float(
        np.median(settled)
    ) >= 0.5 * (lost[0] - level)
    if disturbed or lr_moved_up(run, first):
        return None  # already breaking before the checkpoint (an LR jump at 46, saved at 50)
    first_after = steps[(steps >= first) & finite]
    return Finding(
        category="resume_discontinuity",
        severity="critical",
        confidence=0.7,
        step=int(first_after[0]),
        layer=None,
        message=(
            f"The loss goes back to {fmt(lost[1])}, the run's untrained level ({fmt(lost[0])}"
            f"{lost[2]}), in the first logged steps after the checkpoint of step "
            f"{checkpoint_step}, down from {fmt(level)} before it — the run most likely resumed "
            "from that checkpoint without restoring the weights (a fresh model trained on). The "
            "log itself records no resume: its steps run on"
        )
        + ".",
        evidence={
            "checkpoint_step": checkpoint_step,
            "loss_before": level,
            "loss_after": lost[1],
            "untrained_level": lost[0],
            "weights_lost": True,
            "resume_recorded": False,
        },
        suggestion=(
            f"Check how the run was restarted after step {checkpoint_step}: the model's weights "
            "must be loaded from the checkpoint (model.safetensors / the state dict) before "
            "training goes on; resume again from a complete checkpoint."
        ),
        threshold=(
            "the loss gives back ≥ 80% of what the run had gained, within 2 logged points of a "
            "saved checkpoint, for ≥ 3 points"
        ),
    )


def _data_rewound(event: RunEvent) -> str | None:
    """The data position lost at a resume: the logged epoch went back while the step counted on,
    so the loader started its epoch over and the run trains again on data it has seen."""
    before, after = event.numbers.get(EPOCH_BEFORE_KEY), event.numbers.get(EPOCH_AFTER_KEY)
    if before is None or after is None:
        return None
    steps_again = round(event.numbers.get(STEPS_AGAIN_KEY, 0.0))
    again = f", about {steps_again:,} steps of data seen again" if steps_again > 0 else ""
    return (
        f"the logged epoch goes back from {fmt(before)} to {fmt(after)} while the step counts on "
        f"— the data loader started over instead of skipping to where the run was{again} "
        "(the Trainer's ignore_data_skip=True, or a sampler state that was not restored)"
    )


def _check(run: Run, event: RunEvent, vocab: Vocabulary | None) -> Finding:
    lr = _lr_change(run, event)
    loss = _loss_jump(run, event.step)
    problems = []
    evidence: dict[str, object] = {"resume_step": event.step, **event.numbers}
    if lr is not None:
        evidence.update(lr_before=lr[0], lr_after=lr[1], lr_expected=lr[2])
        if lr[2] > 0 and abs(lr[1] / lr[2] - 1.0) >= LR_JUMP_MIN_RELATIVE:
            trend = (
                f", where it should have been {fmt(lr[2])}"
                + (
                    " (the LR the run logged at that step before the rewind)"
                    if RELOGGED_KEY + LEARNING_RATE in event.numbers
                    else " (its trend before the resume)"
                )
                if lr[2] != lr[0]
                else ""
            )
            problems.append(
                f"the learning rate changes from {fmt(lr[0])} to {fmt(lr[1])}"
                + (f" (×{fmt(lr[1] / lr[0])})" if lr[0] > 0 else "")
                + f" across the resume{trend} — the scheduler state was probably not restored"
            )
    if loss is not None:
        evidence.update(loss_baseline=loss[0], loss_after=loss[1], loss_jump_sigma=loss[2])
        if loss[2] >= RESUME_LOSS_SIGMA and loss[1] >= (1 + MIN_WARNING_EXCESS) * loss[0]:
            problems.append(
                f"the loss jumps from {fmt(loss[0])} to {fmt(loss[1])} ({fmt(loss[2])} robust σ) "
                "in the first steps after it — weights, optimizer state or data position differ "
                "from the original run"
            )
    rewound = _data_rewound(event)
    if rewound is not None:
        problems.append(rewound)
    lost = _weights_lost(run, event.step, vocab)
    if lost is not None:
        evidence.update(untrained_level=lost[0], loss_after=lost[1], weights_lost=True)
        problems.insert(
            0,
            f"the loss goes back to {fmt(lost[1])}, the run's untrained level "
            f"({fmt(lost[0])}{lost[2]}) — the weights were not restored (a fresh model was "
            "trained from the resume on)",
        )
    if problems:
        return Finding(
            category="resume_discontinuity",
            # Weights lost at a resume throws away the training so far: the textbook critical.
            severity="critical" if lost is not None else "warning",
            confidence=0.8 if len(problems) == 2 else 0.7,
            step=event.step,
            layer=None,
            message=f"The run resumed at step {event.step} ({event.detail}); "
            + "; ".join(problems)
            + ".",
            evidence=evidence,
            suggestion=(
                "Check that the resume restored optimizer.pt, scheduler.pt, scaler.pt and the RNG "
                "state (the case's checkpoint list shows what each checkpoint holds), then resume "
                "again from a complete checkpoint."
            ),
            threshold=(
                f"LR change ≥ {LR_JUMP_MIN_RELATIVE:.0%} or loss ≥ {RESUME_LOSS_SIGMA} robust σ "
                f"within {RESUME_CHECK_POINTS} points of the resume"
            ),
        )
    return Finding(
        category="resume_discontinuity",
        severity="info",
        confidence=0.6,
        step=event.step,
        layer=None,
        message=(
            f"The run resumed at step {event.step} ({event.detail}); the learning rate and loss "
            "continue smoothly across it."
        ),
        evidence=evidence,
        suggestion="Nothing to do: a benign resume, listed so the timeline is complete.",
        threshold="no LR or loss discontinuity at the resume",
    )
