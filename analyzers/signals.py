"""Small read-only views of a Run that several explainers need (values at a step, the loss)."""

from __future__ import annotations

import re

import numpy as np

from tscope.model import Run, Spike
from tscope.model.metric_names import (
    EVAL_LOSS,
    GRAD_NORM,
    LOSS,
    LOSS_SCALE,
    SKIPPED_STEPS,
    is_loss_like,
)

# Words that name an evaluation split in a loss series' name (`test_loss`, `Loss/test`,
# `dev_loss`, `holdout/loss`): such a series is the training loss only when nothing else is.
_EVALUATION_WORDS = re.compile(
    r"(?:^|[^a-z])(?:val|valid|validation|eval|test|dev|holdout)(?:[^a-z]|$)"
)


def primary_loss(run: Run) -> str | None:
    """The training loss series: train/loss when logged, else the first other loss-like series
    whose name names no evaluation split, else the first other, else the eval loss."""
    if run.has(LOSS):
        return LOSS
    candidates = [m for m in run.metric_names if is_loss_like(m) and m != EVAL_LOSS]
    candidates.sort(key=lambda name: bool(_EVALUATION_WORDS.search(name.lower())))
    return candidates[0] if candidates else (EVAL_LOSS if run.has(EVAL_LOSS) else None)


def finite_loss_series(run: Run) -> tuple[str, np.ndarray, np.ndarray] | None:
    """(the primary loss's name, its steps, its values) at its finite points only; None without
    a loss series."""
    loss = primary_loss(run)
    if loss is None:
        return None
    steps, values = loss_series(run, loss)
    finite = np.isfinite(values)
    return loss, steps[finite], values[finite]


def window(run: Run, metric: str, first_step: int, last_step: int) -> tuple[np.ndarray, np.ndarray]:
    """(steps, values) with first_step <= step <= last_step."""
    steps, values = run.series(metric)
    keep = (steps >= first_step) & (steps <= last_step)
    return steps[keep], values[keep]


def fmt(number: float | None) -> str:
    """Three significant digits, the report's precision; 'n/a' for missing."""
    if number is None:
        return "n/a"
    if not np.isfinite(number):
        return str(number)
    return f"{number:.3g}"


def spike_size(spike: Spike) -> str:
    """How far a spike went, in the unit of the threshold it crossed, for messages and verdicts.

    NaN/Inf has no distance from a baseline: a σ printed for it (the largest finite point
    before the NaN, or an infinite score) would read as absurd ("926 robust σ" to NaN), so the
    text names it instead. A finite spike shows the score its detector compared with the
    threshold, so "≥ 6 robust σ" is never printed next to "4.38 robust σ".
    """
    if spike.nonfinite:
        return "non-finite"
    if spike.alarm_score is None:
        return f"{fmt(spike.magnitude)} robust σ"
    if spike.alarm_detector == "spike_score":
        return f"{fmt(spike.alarm_score)} σ, OLMo 2 spike score"
    return f"{fmt(spike.alarm_score)} robust σ"


# A stretch of non-finite gradient norms this long that runs to the end of the log is a model
# that went non-finite (see loss_series); one shorter than this at the very end is one more skip.
HIDDEN_NAN_MIN_POINTS = 2


def loss_series(run: Run, metric: str) -> tuple[np.ndarray, np.ndarray]:
    """The loss with NaNs the producer hid put back: where the gradient norm went non-finite for
    good, the loss did too (the Trainer's logging_nan_inf_filter logs a running mean or 0.0
    instead of NaN).

    Only a stretch of non-finite gradient norms that lasts to the end of the log (at least
    HIDDEN_NAN_MIN_POINTS points) counts: without a loss scaler a non-finite gradient makes the
    weights non-finite, and every later norm with them. A non-finite norm followed by finite ones
    is a step the fp16 loss scaler (or DeepSpeed) skipped for overflow, which healthy fp16 runs do
    in their first steps while the scale calibrates down from 2^16 and whenever it tries to grow
    (every 2,000 clean steps); the loss logged there is the step's real loss. So is every step of
    a stretch to the end while a producer that logs its real loss (not the Trainer) logs it at
    its level (`loss_level_held`), or while the logged loss scale keeps falling or the
    skipped-iteration counter keeps rising through it: a scaler skipping every update (a blind
    set's Megatron-style log, session 28: grad norm nan from 230 to 900, the scale halving each
    step, the loss logged 2.3-2.7 throughout) leaves the weights finite."""
    steps, values = run.series(metric)
    dead_from = dead_gradient_from(run)
    if dead_from is None:
        return steps, values
    grad_steps = run.series(GRAD_NORM)[0]
    if _scaler_skipped_from(run, int(grad_steps[dead_from])):
        return steps, values
    hidden = np.isin(steps, grad_steps[dead_from:])
    if not hidden.any():
        return steps, values
    if not hides_nonfinite_loss(run) and loss_level_held(values, np.flatnonzero(hidden)):
        # A loop that logs its real loss kept logging its level after the gradient died: the
        # weights did not change, so every update was skipped (a loss scaler whose scale is not
        # logged: explainers/loss_scale_unlogged.py). A blind set's fp16 loop (session 30)
        # logged ~2.3 for 65 steps after its gradient norm went NaN for good and read "the loss
        # became NaN at 236".
        return steps, values
    values = values.copy()
    values[hidden] = np.nan
    return steps, values


def dead_gradient_from(run: Run) -> int | None:
    """The index into the gradient-norm series from which it is non-finite to the end of the
    log, when that stretch holds at least HIDDEN_NAN_MIN_POINTS points; else None."""
    grads = run.series(GRAD_NORM)[1]
    if grads.size == 0:
        return None
    finite_grads = np.flatnonzero(np.isfinite(grads))
    dead_from = int(finite_grads[-1]) + 1 if finite_grads.size else 0
    return dead_from if grads.size - dead_from >= HIDDEN_NAN_MIN_POINTS else None


# "Held its level": the median of the loss logged through a dead-gradient stretch is within this
# factor of the median of the HELD_LEVEL_POINTS finite points before it (a run whose weights went
# non-finite logs NaN; one whose loss exploded first logs values far above its level).
HELD_LEVEL_FACTOR = 1.5
HELD_LEVEL_POINTS = 20


def loss_level_held(values: np.ndarray, stretch: np.ndarray) -> bool:
    """Whether the loss stayed finite and at its level through `stretch` (indices), its first
    point aside (that step's forward ran before its gradient overflowed)."""
    later = values[stretch[1:]]
    before = last_finite(values, int(stretch[0]), HELD_LEVEL_POINTS)
    if later.size == 0 or before.size == 0 or not np.isfinite(later).all():
        return False
    level, held = float(np.median(before)), float(np.median(later))
    return level > 0 and level / HELD_LEVEL_FACTOR <= held <= level * HELD_LEVEL_FACTOR


# The HF Trainer's readers (trainer_state.json, its printed log rows): the producer whose
# logging_nan_inf_filter (on by default) logs a running mean where the loss was NaN.
TRAINER_SOURCE_PREFIX = "hf_trainer"


def hides_nonfinite_loss(run: Run) -> bool:
    """Whether a producer of the run logs something else where the loss was NaN (the Trainer)."""
    return any(source.kind.startswith(TRAINER_SOURCE_PREFIX) for source in run.sources)


def _scaler_skipped_from(run: Run, first_step: int) -> bool:
    """Whether the log shows a loss scaler skipping the updates from `first_step` on: its scale
    falls, or its skipped-iteration count rises, within one logged point of `first_step` and at
    least once more after it."""
    for metric, falls in ((LOSS_SCALE, True), (SKIPPED_STEPS, False)):
        steps, values = run.series(metric)
        keep = np.isfinite(values)
        steps, values = steps[keep], values[keep]
        changes = np.diff(values)
        moved = changes < 0 if falls else changes > 0
        moved_at = steps[1:][moved]  # changes[i] is seen at steps[i + 1]
        earlier = steps[steps < first_step]
        since = earlier[-1] if earlier.size else first_step
        first_move = moved_at[moved_at >= since]
        if first_move.size >= 2 and first_move[0] <= first_step + (first_step - since):
            return True
    return False


def last_finite(values: np.ndarray, stop: int, count: int) -> np.ndarray:
    """values[:stop][np.isfinite(values[:stop])][-count:] without testing the whole prefix:
    windows ending at `stop`, growing until they hold `count` finite values (or reach the start).
    The baselines before an event (measure_impact per spike, repeated_data per candidate stretch)
    ask for it hundreds of times on a long log, each a pass over up to the whole series (0.3 s
    on a 250,000-point log)."""
    if stop < 0 or count <= 0:  # a negative stop slices from the end: the expression as is
        prefix = values[:stop]
        kept: np.ndarray = prefix[np.isfinite(prefix)][-count:]
        return kept
    span = count
    while True:
        start = max(0, stop - span)
        window = values[start:stop]
        finite = window[np.isfinite(window)]
        if finite.size >= count or start == 0:
            last: np.ndarray = finite[-count:]
            return last
        span *= 4
