"""lr_too_high, the stalled kind: a warm-up that climbs to a peak above the typical range, and a
loss that stops improving once the LR gets there.

warmup_stall.py reads a run that starts at its peak with no warm-up. A warm-up postpones the same
failure to the warm-up's end: an LR above what the model can train at does not break the loss
(no spike, no divergence) but keeps Adam's steps so large that the loss settles at a level and
stays there for as long as the LR holds, where a model that trains keeps falling (a blind set's
plain loop, session 27: warmed up to 0.04 by step 150 and held; the loss went 3.2 -> 2.61 during
the warm-up and was still 2.62 at step 850, while the same model at a typical LR reached ~2.0).

The rule, from the logs alone; each condition is needed:
- the LR is logged from the start, rises to its peak without a jump (a warm-up: an LR jump is
  lr_schedule_jump's) and reaches it within the first PEAK_BY_FRACTION of the run, and the peak
  is above the typical range for training from scratch (lr_config.TYPICAL_LR), for an Adam-style
  optimizer (optimizer_family) on a run that is not a fine-tune (training_kind);
- the LR then holds at ≥ HOLD_RELATIVE of its peak over the HELD_FRACTION of the run after it;
- over that stretch the loss's median gains less than STALL_MAX_GAIN (warmup_stall's bound) from
  the segment right after the peak to the segment at the stretch's end.
Measured: the benchmark's controls and planted runs warm up to peaks of at most 1e-2 (0 of them
pass the first condition, as warmup_stall's controls pass none of its no-warm-up condition); the
persistent LR jumps that raise it past 1e-2 are jumps, not warm-ups.
"""

from __future__ import annotations

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.learning_rate import lr_jumps
from tscope.analyzers.explainers.lr_config import TYPICAL_LR, first_at_peak
from tscope.analyzers.explainers.warmup_stall import (
    NO_WARMUP_MAX_STEPS,
    SEGMENT_FRACTION,
    STALL_MAX_GAIN,
    scratch_logs,
)
from tscope.analyzers.signals import fmt
from tscope.model import Finding

# The warm-up reaches its peak within this fraction of the logged run.
PEAK_BY_FRACTION = 0.5
# "Holds": the LR stays at ≥ this share of its peak (a slow decay after the peak is no hold).
HOLD_RELATIVE = 0.9
# ...over at least this fraction of the logged loss points after the peak.
HELD_FRACTION = 0.4
# Fewer logged loss points than this and the segments are too short to judge.
MIN_POINTS = 100


class PeakStallExplainer:
    name = "peak_stall"
    categories: tuple[str, ...] = ("lr_too_high",)
    defines = ()  # declared by the LR explainers (learning_rate.py)

    def run(self, evidence: Evidence) -> list[Finding]:
        logs = scratch_logs(evidence, MIN_POINTS)
        if logs is None:
            return []
        lr_steps, lrs, steps, values, kind = logs
        peak = float(lrs.max())
        top = TYPICAL_LR["pre_training"][1]
        at_peak = first_at_peak(lrs)
        peak_step = int(lr_steps[at_peak])
        warmed_up = peak_step - int(lr_steps[0]) > NO_WARMUP_MAX_STEPS
        if peak <= top or not warmed_up or lr_jumps(lr_steps[: at_peak + 1], lrs[: at_peak + 1]):
            return []
        n = values.size
        start = int(np.searchsorted(steps, peak_step, "left"))
        if start > PEAK_BY_FRACTION * n:
            return []
        # The held stretch: loss points after the peak while the LR stays near it.
        below = np.flatnonzero((lr_steps > peak_step) & (lrs < HOLD_RELATIVE * peak))
        held_until = int(lr_steps[below[0]]) if below.size else int(steps[-1]) + 1
        end = int(np.searchsorted(steps, held_until, "left"))
        segment = max(5, int(SEGMENT_FRACTION * n))
        if end - start < max(HELD_FRACTION * n, 3 * segment):
            return []
        after_peak = float(np.median(values[start : start + segment]))
        at_end = float(np.median(values[end - segment : end]))
        gain = (after_peak - at_end) / after_peak if after_peak > 0 else 0.0
        if gain >= STALL_MAX_GAIN:
            return []  # it kept learning at its peak
        end_step = int(steps[end - 1])
        low, high = TYPICAL_LR["pre_training"]
        return [
            Finding(
                category="lr_too_high",
                severity="warning",
                confidence=0.6,
                step=peak_step,
                layer=None,
                message=(
                    f"The learning rate warmed up to {fmt(peak)} by step {peak_step}, above the "
                    f"typical {fmt(low)}–{fmt(high)} for training from scratch, and held there; "
                    f"the loss stopped improving once it got there: its median went from "
                    f"{fmt(after_peak)} right after step {peak_step} to {fmt(at_end)} by step "
                    f"{end_step} ({abs(gain):.1%} {'lower' if gain >= 0 else 'higher'}). A model "
                    "that trains keeps falling at its peak LR; steps this large keep it at a level."
                ),
                evidence={
                    "peak_lr": peak,
                    "peak_step": peak_step,
                    "held_until_step": end_step,
                    "median_after_peak": after_peak,
                    "median_at_end": at_end,
                    "relative_gain": gain,
                    "training_kind": kind.kind if kind is not None else None,
                },
                suggestion=(
                    "Lower the peak learning rate into the typical range (or check its units) "
                    "and restart from a checkpoint before the peak."
                ),
                threshold=(
                    f"a warm-up to a peak LR above {fmt(high)}, held at ≥ {HOLD_RELATIVE:.0%} of "
                    f"it over ≥ {HELD_FRACTION:.0%} of the run, the loss's median < "
                    f"{STALL_MAX_GAIN:.0%} lower over that stretch"
                ),
            )
        ]
