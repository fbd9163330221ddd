"""What counts as right: planted cause → the finding categories that name it, and where.

This is the one place the mapping lives (docs/accuracy.md prints it from here). Categories are the
stable ids of /work/shared/spec/CONTRACT.md "Finding categories" and docs/case-schema.md.

A headline names the planted cause when its cause category is in `ACCEPTED[cause]` (plus
`EXTRA_BY_PRODUCER`) and its step lies in the cause's window (`step_window`). The step compared is
the step of the finding the card names as the cause, or the card's step when the cause is inferred
(the summary's "most likely a bad batch" names no finding).

Windows, in steps (each producer logs every step):
- a cause that acts at one step (bad batch, LR jump, resume): the planted step ±1 (the logged loss
  of step k is computed before step k's update, so an LR jump at k shows at k+1; a resume from
  checkpoint R acts at R+1). A finding read from checkpoints can only be placed at a checkpoint:
  from the planted step − 1 to the first checkpoint at or after it.
- an LR ramp has no single step: from its first step to the end of the run.
- warm-up too hot acts from step 1: the first 30 steps or the first fifth of the run.
- repeated data: from its first step − 1 to one step after the repetition ends.
- frozen layer: seen only across checkpoints, so from the step it was frozen to the end.
"""

from __future__ import annotations

import math

from spec import (
    BAD_BATCH,
    FROZEN_LAYER,
    LR_JUMP_PERSISTENT,
    LR_JUMP_TRANSIENT,
    LR_RAMP,
    REPEATED_DATA,
    RESUME_OPTIMIZER_LOST,
    RESUME_SCHEDULER_LOST,
    RESUME_WEIGHTS_REINIT,
    WARMUP_TOO_HOT,
    RunSpec,
    knob,
)

ACCEPTED: dict[str, frozenset[str]] = {
    BAD_BATCH: frozenset({"bad_batch"}),
    LR_JUMP_TRANSIENT: frozenset({"lr_schedule_jump"}),
    LR_JUMP_PERSISTENT: frozenset({"lr_schedule_jump"}),
    LR_RAMP: frozenset({"lr_ramp", "lr_too_high", "lr_schedule_jump"}),
    WARMUP_TOO_HOT: frozenset({"warmup_too_short", "lr_too_high"}),
    RESUME_OPTIMIZER_LOST: frozenset({"optimizer_state_reset", "resume_discontinuity"}),
    RESUME_SCHEDULER_LOST: frozenset({"resume_discontinuity", "lr_schedule_jump"}),
    # A weights-lost category may join the registry; until then the resume finding is the cause.
    RESUME_WEIGHTS_REINIT: frozenset({"resume_discontinuity"}),
    # The data are the cause: the repetition itself, or the registry's other data cause.
    REPEATED_DATA: frozenset({"repeated_data", "bad_batch"}),
    FROZEN_LAYER: frozenset({"frozen_parameters"}),
}
# The Trainer loads optimizer and scheduler only together: a lost scheduler.pt is also a lost
# optimizer state, so naming that is right too.
EXTRA_BY_PRODUCER: dict[tuple[str, str], frozenset[str]] = {
    (RESUME_SCHEDULER_LOST, "trainer_gpt2"): frozenset({"optimizer_state_reset"}),
    (RESUME_SCHEDULER_LOST, "trainer_llama"): frozenset({"optimizer_state_reset"}),
}
# Observations (not causes) that are true on a planted run when they sit in the cause's window:
# used only to score every alert finding for the calibration table, never for the headline.
# `loss_plateau` is an observation of the loss like a spike (the registry's role `symptom`): a
# warm-up 10x too hot stalls the loss for half the run, and the finding says exactly that.
# `weight_norm_growth` is the weights' side of `update_ratio_high`: after an LR raised 20x the
# norms grow faster than before, a true consequence of the cause.
SYMPTOMS = frozenset(
    {
        "loss_spike",
        "loss_divergence",
        "loss_plateau",
        "grad_norm_spike",
        "grad_norm_high",
        "nan_loss",
        "nonfinite_weights",
        "update_ratio_high",
        "weight_norm_growth",
    }
)
# "The LR is too high" is a true description of what an LR raised by a jump did; near a bad
# batch, a resume or repeated data it names a cause that is not there (the causes that accept it
# as their name, a ramp and a hot warm-up, are in ACCEPTED).
SYMPTOMS_BY_CAUSE: dict[str, frozenset[str]] = {
    LR_JUMP_TRANSIENT: frozenset({"lr_too_high"}),
    LR_JUMP_PERSISTENT: frozenset({"lr_too_high"}),
}
# Causes with no effect on the loss: a symptom near them is not theirs.
NO_SYMPTOMS = frozenset({FROZEN_LAYER})
# Findings that name the planted cause without being a cause category: the Trainer producer
# plants a lost optimizer or scheduler by deleting optimizer.pt / scheduler.pt from the
# checkpoint it then resumes from, and `checkpoint_incomplete` at that checkpoint names the
# missing file. (nanoGPT's loop keeps the optimizer in ckpt.pt and loses it at load time, so a
# `checkpoint_incomplete` there, about its RNG state, is not the cause and stays wrong.)
NAMES_CAUSE_BY_PRODUCER: dict[tuple[str, str], frozenset[str]] = {
    (cause, producer): frozenset({"checkpoint_incomplete"})
    for cause in (RESUME_OPTIMIZER_LOST, RESUME_SCHEDULER_LOST)
    for producer in ("trainer_gpt2", "trainer_llama")
}

WARMUP_WINDOW_STEPS = 30


def accepted(spec: RunSpec) -> frozenset[str]:
    return ACCEPTED[spec.cause] | EXTRA_BY_PRODUCER.get((spec.cause, spec.producer), frozenset())


def _first_checkpoint_at_or_after(spec: RunSpec, step: int) -> int:
    return int(math.ceil(step / spec.save_every) * spec.save_every)


def _first_logged_at_or_after(spec: RunSpec, step: int) -> int:
    """The first step at or after `step` the producer logs (every step in the benchmark; every
    `logging_steps` in bench/ood's Trainer runs, whose loss there averages the steps since)."""
    every = int(knob(spec, "logging_steps"))
    return int(math.ceil(step / every) * every)


def step_window(spec: RunSpec, source: str = "logs") -> tuple[int, int]:
    """The steps (inclusive) where a finding about the planted cause may sit."""
    step = spec.logged(int(spec.plant["step"]))
    if spec.cause == LR_RAMP or spec.cause == FROZEN_LAYER:
        return step - 1, spec.steps
    if spec.cause == WARMUP_TOO_HOT:
        return step - 1, max(WARMUP_WINDOW_STEPS, spec.steps // 5)
    if spec.cause == REPEATED_DATA:
        return step - 1, step + int(spec.plant["length"]) + 1
    if source == "checkpoints":
        return step - 1, max(step + 1, _first_checkpoint_at_or_after(spec, step + 1))
    return step - 1, _first_logged_at_or_after(spec, step + 1)


def symptom_window(spec: RunSpec) -> tuple[int, int]:
    """Where the loss shows what the cause did: a bad batch a step or two, an LR jump until it
    ends and the loss recovers, a persistent cause to the end of the run."""
    low, high = step_window(spec)
    if spec.cause == BAD_BATCH:
        return low, high + 2
    if spec.cause == LR_JUMP_TRANSIENT:
        return low, spec.logged(int(spec.plant["step"])) + int(spec.plant["window"]) + 20
    return low, spec.steps


def cause_is_right(spec: RunSpec, category: str, step: int | None, source: str) -> bool:
    if spec.cause not in ACCEPTED or category not in accepted(spec) or step is None:
        return False
    low, high = step_window(spec, source)
    return low <= step <= high


def finding_is_right(spec: RunSpec, category: str, step: int | None, source: str) -> bool:
    """For calibration: a finding is right when it names the planted cause in its window (a
    cause category of ACCEPTED, or NAMES_CAUSE_BY_PRODUCER), or is a true observation of what
    the cause did (a symptom in the cause's window). On a control no alert is right."""
    if spec.cause not in ACCEPTED or step is None:
        return False
    if cause_is_right(spec, category, step, source):
        return True
    if category in NAMES_CAUSE_BY_PRODUCER.get((spec.cause, spec.producer), frozenset()):
        low, high = step_window(spec, source)
        return low <= step <= high
    symptoms = SYMPTOMS | SYMPTOMS_BY_CAUSE.get(spec.cause, frozenset())
    if category in symptoms and spec.cause not in NO_SYMPTOMS:
        low, high = symptom_window(spec)
        if source == "checkpoints":
            high = max(high, _first_checkpoint_at_or_after(spec, high))
        return low <= step <= high
    return False
