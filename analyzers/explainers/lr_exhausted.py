"""lr_too_low from the logged schedule: the learning rate reached zero long before training ended.

A schedule sized for the steps run reaches its floor at the end (a linear or cosine decay to 0
at max_steps). One that reaches 0 at a fraction of the run and stays there trained nothing after:
a scheduler stepped once per micro-batch under gradient accumulation (it ends at max_steps / k),
or num_training_steps smaller than the steps actually run. A planted-cause hunt (session 25)
found a run logged as healthy whose LR was exactly 0 over its last 300 of 400 steps.
"""

from __future__ import annotations

import numpy as np

from tscope.analyzers.signals import fmt, loss_series, primary_loss
from tscope.model import Finding, Run

# "Zero": at most this fraction of the peak (Adam's update is proportional to the LR, so the
# weights move at most 0.1% of their peak-LR pace: nothing over the rest of a run).
EXHAUSTED_FRACTION = 1e-3
# ...from where on to the end of the log, over at least this share of the logged steps and this
# many logged points (a decay that reaches 0 at the last points is the schedule ending on time).
EXHAUSTED_MIN_SHARE = 0.2
EXHAUSTED_MIN_POINTS = 10


def lr_exhausted(run: Run, steps: np.ndarray, lrs: np.ndarray, quantum: float) -> list[Finding]:
    """`quantum`: the unit the LR was printed in (0: full precision). A printed 0 only says the
    LR was under half a unit: an LR printed to four decimals (Composer's console) reads 0.0000
    at the end of a healthy cosine decay to 1e-5."""
    finite = np.isfinite(lrs)
    steps, lrs = steps[finite], lrs[finite]
    if lrs.size < 2 * EXHAUSTED_MIN_POINTS:
        return []
    peak_index = int(np.argmax(lrs))
    peak = float(lrs[peak_index])
    if not peak > 0 or quantum / 2 > EXHAUSTED_FRACTION * peak:
        return []
    above = np.flatnonzero(lrs > EXHAUSTED_FRACTION * peak)
    end = int(above[-1]) + 1  # the first point of the final stretch at zero
    if end >= lrs.size or end <= peak_index:
        return []
    points = lrs.size - end
    span, logged = float(steps[-1] - steps[end]), float(steps[-1] - steps[0])
    if points < EXHAUSTED_MIN_POINTS or logged <= 0 or span < EXHAUSTED_MIN_SHARE * logged:
        return []
    zero_step = int(steps[end])
    return [
        Finding(
            category="lr_too_low",
            severity="warning",
            confidence=0.9,
            step=zero_step,
            layer=None,
            message=(
                f"The learning rate reached {fmt(float(lrs[end]))} at step {zero_step} (its peak "
                f"{fmt(peak)} at step {int(steps[peak_index])}) and stayed there to the last "
                f"logged step {int(steps[-1])}: the last {span / logged:.0%} of the run trained "
                f"nothing{_loss_text(run, zero_step)}. The schedule ended early."
            ),
            evidence={
                "peak_lr": peak,
                "peak_step": int(steps[peak_index]),
                "zero_from_step": zero_step,
                "last_step": int(steps[-1]),
                "share_at_zero": span / logged,
            },
            suggestion=(
                "Size the schedule to the optimizer steps run: a scheduler stepped per "
                "micro-batch under gradient accumulation ends at max_steps / k; check "
                "num_training_steps (or the scheduler's total) against max_steps."
            ),
            threshold=(
                f"LR ≤ {EXHAUSTED_FRACTION:g} × its peak from some point to the end of the log, "
                f"over ≥ {EXHAUSTED_MIN_SHARE:.0%} of the logged steps and ≥ "
                f"{EXHAUSTED_MIN_POINTS} points"
            ),
        )
    ]


def _loss_text(run: Run, step: int) -> str:
    loss = primary_loss(run)
    if loss is None:
        return ""
    steps, values = loss_series(run, loss)
    after = values[(steps >= step) & np.isfinite(values)]
    if after.size < EXHAUSTED_MIN_POINTS:
        return ""
    head, tail = after[: after.size // 5 or 1], after[-(after.size // 5 or 1) :]
    return f" ({loss} {fmt(float(np.median(head)))} → {fmt(float(np.median(tail)))} over it)"
