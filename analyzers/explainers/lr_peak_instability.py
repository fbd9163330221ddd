"""lr_too_high from the logged curve: the loss blew up while the learning rate was at or climbing
to its peak. The finding is emitted by the learning-rate explainer (explainers/learning_rate.py),
which declares the category and passes the effect windows of upward LR jumps (a blow-up there is
the jump's); this module is the rule."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.explainers.divergence import loss_rise
from tscope.analyzers.reach import LR_EFFECT_WINDOW_POINTS
from tscope.analyzers.signals import fmt, loss_series, primary_loss
from tscope.model import Finding, Run, Spike

# A peak held without trouble for most of the run before the blow-up is not implicated,
# however short the log: the run trained there for PEAK_HELD_FRACTION of its logged points (and
# at least PEAK_HELD_MIN_POINTS) with the loss falling, and nothing in the LR changed at the onset.
PEAK_HELD_FRACTION = 0.5
PEAK_HELD_MIN_POINTS = 10
# "Still climbing": the LR at the onset is above its value this many logged points back.
RECENT_RISE_POINTS = LR_EFFECT_WINDOW_POINTS // 4


def lr_too_high_at_peak(
    run: Run,
    steps: np.ndarray,
    lrs: np.ndarray,
    spikes: list[Spike],
    raised_by_jump: list[tuple[int, int]],
) -> list[Finding]:
    """The loss blew up (a lasting rise, or a spike that never recovered) at peak or rising LR,
    outside the effect windows `raised_by_jump` of upward LR jumps."""
    loss = primary_loss(run)
    if loss is None:
        return []
    loss_steps, loss_values = loss_series(run, loss)
    found = loss_rise(loss_steps, loss_values)
    unrecovered = [s.onset_step for s in spikes if s.metric == loss and s.end_step is None]
    if found is not None:
        onset_step = int(loss_steps[found[0]])
    elif unrecovered:
        onset_step = min(unrecovered)
    else:
        return []
    if any(start <= onset_step <= end for start, end in raised_by_jump):
        return []
    before = lrs[steps <= onset_step]
    if before.size < 2 or not np.isfinite(before).all():
        return []
    lr_at_onset = float(before[-1])
    peak_so_far = float(before.max())
    lookback = before[-min(LR_EFFECT_WINDOW_POINTS, before.size)]
    # Still climbing: higher than RECENT_RISE_POINTS back, not only than the effect window's
    # start (in a short log that start is inside the warm-up, long finished at the onset).
    recent = before[-min(RECENT_RISE_POINTS + 1, before.size)]
    climbing = lr_at_onset > lookback * (1 + 1e-9) and lr_at_onset > recent * (1 + 1e-9)
    if lr_at_onset < 0.95 * peak_so_far:
        return []
    # An LR that sat at its peak for a long time without trouble is not implicated: the peak
    # must have been reached recently (or still be climbing).
    reached_peak = int(np.flatnonzero(before >= 0.95 * peak_so_far)[0])
    held = before.size - 1 - reached_peak
    if not climbing and (
        held > 2 * LR_EFFECT_WINDOW_POINTS
        or (held >= PEAK_HELD_MIN_POINTS and held >= PEAK_HELD_FRACTION * (before.size - 1))
    ):
        return []
    state = "still climbing" if climbing else "at its peak"
    return [
        Finding(
            category="lr_too_high",
            severity="warning",
            confidence=0.75 if climbing else 0.55,
            step=onset_step,
            layer=None,
            message=(
                f"The loss blew up at step {onset_step} while the learning rate was {state} "
                f"({fmt(lr_at_onset)}"
                + (
                    f", ×{fmt(lr_at_onset / lookback)} over the previous "
                    f"{min(LR_EFFECT_WINDOW_POINTS, before.size)} logged points"
                    if climbing and lookback > 0
                    else ""
                )
                + "): the run did not tolerate this LR."
            ),
            evidence={
                "lr_at_divergence": lr_at_onset,
                "max_lr_before": peak_so_far,
                "first_lr": float(before[0]),
                "lr_climbing": bool(climbing),
                "divergence_step": onset_step,
            },
            suggestion=(
                "Lower the peak learning rate (e.g. halve it) or cap the schedule; restart from a "
                "checkpoint before the onset."
            ),
            threshold=(
                "divergence while the LR is ≥ 95% of its maximum so far and still climbing, or "
                f"there for at most {2 * LR_EFFECT_WINDOW_POINTS} logged points and less than "
                f"{PEAK_HELD_FRACTION:.0%} of the log before the onset"
            ),
        )
    ]
