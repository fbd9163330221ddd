"""bad_batch from logs: a one-step loss break with the gradient norm spiking in the same step.

bench/accuracy/planting.py corrupts rows of one step's batch (one row up to all of them) with
random tokens. The step's loss is the batch's mean, so it rises by the corrupted fraction of the
gap between random text's loss and the model's; the next batch is ordinary again, and the loss is
back on its trend the next step. The update of that batch is pushed by those rows, so the
gradient norm logged for the same step spikes too. That shape — exactly one point above the local
trend, the points either side on it, and a gradient-norm spike at that point — is what this rule
reads. Healthy sequential data bumps the loss for several points as the text changes (no single
point), and its one-point bumps come without a gradient spike (measured below).

What the logs cannot tell: an ordinary but unusual batch (a page of tables, base64) gives the same
shape, and so does a one-step LR glitch; `tscope replay --around N` decides (the batch alone
breaks the loss, or not). The finding says so, and its confidence is the rule's measured
precision, not a certainty.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.learning_rate import lr_jumps
from tscope.analyzers.explainers.spikes import TEXTURE_SPIKES_PER_1000, is_notable, is_texture
from tscope.analyzers.signals import fmt, loss_series, primary_loss
from tscope.model import Finding, Run
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE

# The local trend at a point: the median of this many loss points on each side (the point itself
# left out), so that a one-point break cannot move it.
TREND_POINTS = 5
# One step: the points just before and after are within this fraction of the break's excess from
# the trend (a bad batch's update leaves the next loss near the trend: planted dev runs −0.16 to
# +0.18; a healthy sequential-data bump stays up for 2–5 points).
ONE_STEP_FRACTION = 0.35
# The gradient norm of the same step against the median of GRAD_NEIGHBOURS logged values on each
# side. Measured (dev split, 2026-12-01): planted bad batches 3.4–6.1× where the loss broke
# visibly; on the 21 dev controls and 13 extra ones the one-step loss bumps ≥ +10% after the
# early phase come with at most 2.1× (sequential data: +20–29% bumps at 1.5–2.1×).
GRAD_NEIGHBOURS = 10
MIN_GRAD_RATIO = 2.5
# The break's size: the loss ≥ this × its local trend. Measured (2026-12-01), one-step breaks
# with the gradient spike ≥ MIN_GRAD_RATIO after the early phase, on healthy runs: the 21 dev
# controls and the healthy parts of the 74 planted dev runs (before their planted step) ≤ 1.11×;
# 13 extra controls trained with other seeds (half of them sequential data) ≤ 1.14× (a
# sequential Llama control at step 156, gradient 2.6×). 1.2 keeps a margin over that; the
# visible planted dev breaks are 1.25–2.32× (one corrupted row of 16 gives 1.03–1.09×, inside
# the healthy range: not detectable from the log).
MIN_BREAK_RATIO = 1.2
# The early phase: the first EARLY_FRACTION of the logged points. Right after warm-up, healthy
# runs break for one step with a gradient norm 18–76× its neighbours and the loss 1.05–1.51×
# (dev split: steps 17–35 of runs of 100–190 steps, at most 29% into the run): an optimization
# instability at the peak LR that the logs cannot tell from a bad batch, so no rule here speaks
# for that phase (the planted bad batches sit at 35–80% of their runs).
EARLY_FRACTION = 0.3
# A break within this many logged points after a logged LR jump is the jump's (the LR explainer
# names it), and so is a break while the LR climbs: ≥ LR_RISE_FACTOR × its lowest value over the
# LR_RISE_LOOKBACK_POINTS logged LR points before. After the early phase a healthy schedule
# decays or holds; on the dev split the only two breaks this rule gave away from a planted bad
# batch were both in LR-ramp runs, 69 and 66 steps into a ×1.04–1.12-per-step climb.
LR_JUMP_LOOKBACK_POINTS = 10
LR_RISE_LOOKBACK_POINTS = 20
LR_RISE_FACTOR = 1.25
# A run whose loss bumps all the time (spikes.is_texture: ≥ 3 spikes, more than
# TEXTURE_SPIKES_PER_1000) gets this reading only for a break that stands out from its routine
# bumps (spikes.is_notable), and none when the rule itself fires that often. Measured
# (2026-12-01): the healthy baize LoRA log (batch 2, 6,687 points) had 9 one-step breaks of
# 1.17–1.78× with the gradient norm 2.5–3.3× — 1.3 per 1,000 points, a texture run — and was the
# only real log of 76 with any; 0 after this rule.
# Confidence: the rule's measured precision as a prior, (right + 1) / (found + 2), on the dev
# split where it was tuned: 4 findings, all 4 at a planted bad batch → 5/6. Measured on the same
# runs it was tuned on: the test split decides; calibration.py may replace it for the headline.
LOGS_CONFIDENCE = 0.83


@dataclass(frozen=True)
class OneStepBreak:
    step: int
    loss: float
    trend: float
    ratio: float  # loss / trend
    before: float  # (previous loss − trend) / excess
    after: float  # (next loss − trend) / excess
    grad_norm: float
    grad_ratio: float  # the step's gradient norm / its neighbours' median


def one_step_breaks(run: Run, min_ratio: float = 1.0) -> list[OneStepBreak]:
    """Every one-point loss break ≥ min_ratio × its trend after the early phase, with the
    gradient norm logged at the same step (no gradient norm: nothing)."""
    loss = primary_loss(run)
    if loss is None or not run.has(GRAD_NORM):
        return []
    steps, values = loss_series(run, loss)
    finite = np.isfinite(values)
    steps, values = steps[finite], values[finite]
    grad_steps, grads = run.series(GRAD_NORM)
    keep = np.isfinite(grads)
    grad_steps, grads = grad_steps[keep], grads[keep]
    grad_index = {int(s): i for i, s in enumerate(grad_steps)}
    found = []
    first = max(int(EARLY_FRACTION * values.size), TREND_POINTS)
    for i in range(first, values.size - 1):
        neighbours = np.r_[
            values[max(0, i - TREND_POINTS) : i], values[i + 1 : i + 1 + TREND_POINTS]
        ]
        trend = float(np.median(neighbours))
        if trend <= 0 or values[i] < min_ratio * trend or values[i] <= trend:
            continue
        excess = float(values[i]) - trend
        before = (float(values[i - 1]) - trend) / excess
        after = (float(values[i + 1]) - trend) / excess
        if before > ONE_STEP_FRACTION or after > ONE_STEP_FRACTION:
            continue
        g = grad_index.get(int(steps[i]))
        if g is None:
            continue
        around = np.r_[
            grads[max(0, g - GRAD_NEIGHBOURS) : g], grads[g + 1 : g + 1 + GRAD_NEIGHBOURS]
        ]
        typical = float(np.median(around)) if around.size else float("nan")
        grad_ratio = float(grads[g]) / typical if typical > 0 else float("inf")
        found.append(
            OneStepBreak(
                int(steps[i]),
                float(values[i]),
                trend,
                float(values[i]) / trend,
                before,
                after,
                float(grads[g]),
                grad_ratio,
            )
        )
    return found


class BadBatchLogsExplainer:
    name = "bad_batch_logs"
    categories: tuple[str, ...] = ("bad_batch",)
    defines = ()  # its categories are declared by the explainers that mainly produce them

    def run(self, evidence: Evidence) -> list[Finding]:
        loss = primary_loss(evidence.run)
        breaks = [
            b
            for b in one_step_breaks(evidence.run, MIN_BREAK_RATIO)
            if b.grad_ratio >= MIN_GRAD_RATIO
        ]
        if loss is not None and is_texture(evidence.run, loss, evidence.spikes):
            breaks = [b for b in breaks if b.step in _standout_steps(evidence, loss)]
        if len(breaks) >= 3 and len(breaks) * 1000 > TEXTURE_SPIKES_PER_1000 * _points(evidence):
            breaks = []  # this run breaks like this all the time: its texture, not one batch
        spikes = {s.peak_step: s.id for s in evidence.spikes if s.metric == loss}
        return [
            _finding(str(loss), b, spikes.get(b.step))
            for b in breaks
            if not lr_moved_up(evidence.run, b.step)
        ]


def _standout_steps(evidence: Evidence, loss: str) -> set[int]:
    """Peaks of the loss spikes that stand out from a bumpy run's routine ones (spikes.py)."""
    return {
        s.peak_step
        for s in evidence.spikes
        if s.metric == loss and is_notable(evidence.run, s, evidence.spikes)
    }


def _points(evidence: Evidence) -> int:
    loss = primary_loss(evidence.run)
    return 0 if loss is None else int(evidence.run.series(loss)[0].size)


def lr_moved_up(run: Run, step: int) -> bool:
    """The logged LR jumped within LR_JUMP_LOOKBACK_POINTS before `step`, or has been climbing
    (see LR_RISE_FACTOR): the break is the LR's to explain, not a batch's."""
    if not run.has(LEARNING_RATE):
        return False
    steps, lrs = run.series(LEARNING_RATE)
    if any(
        0 <= _points_between(run, jump.step, step) <= LR_JUMP_LOOKBACK_POINTS
        for jump in lr_jumps(steps, lrs)
    ):
        return True
    before = lrs[steps <= step][-LR_RISE_LOOKBACK_POINTS - 1 :]
    before = before[np.isfinite(before) & (before > 0)]
    return bool(before.size >= 2 and before[-1] >= LR_RISE_FACTOR * before.min())


def _points_between(run: Run, first: int, last: int) -> int:
    """Logged loss points after `first` up to `last` (negative when `last` is before `first`)."""
    loss = primary_loss(run)
    if loss is None or last < first:
        return -1
    steps, _ = run.series(loss)
    return int(((steps > first) & (steps <= last)).sum())


def _finding(loss: str, b: OneStepBreak, spike_id: str | None) -> Finding:
    return Finding(
        category="bad_batch",
        severity="warning",
        confidence=LOGS_CONFIDENCE,
        step=b.step,
        layer=None,
        message=(
            f"{loss} broke for exactly one step at step {b.step}: {fmt(b.loss)}, "
            f"{fmt(b.ratio)}× its local trend of {fmt(b.trend)}, with the points either side on "
            f"the trend and the gradient norm of the same step at {fmt(b.grad_norm)} "
            f"({fmt(b.grad_ratio)}× its neighbours): the shape of one bad batch. An unusual but "
            f"valid batch or a one-step LR glitch looks the same in the logs; `tscope replay "
            f"--around {b.step}` shows whether the batch alone breaks the loss."
        ),
        evidence={
            "step": b.step,
            "loss": b.loss,
            "trend": b.trend,
            "ratio_to_trend": b.ratio,
            "previous_vs_excess": b.before,
            "next_vs_excess": b.after,
            "grad_norm": b.grad_norm,
            "grad_norm_ratio": b.grad_ratio,
            # For the cause competition: a bad batch acts at its own step (lead 0: the loss and
            # the gradient norm logged for a step come from the same batch), one-step shape.
            "onset_lead_steps": 0,
            "shape": "one_step_break",
        },
        suggestion=(
            f"Inspect the batch of step {b.step} (sample ids, or `tscope replay --around "
            f"{b.step}`); if it is corrupted, drop it and add a data check; skipping it on "
            "restart is enough for a one-off."
        ),
        spike_id=spike_id,
        threshold=(
            f"one point ≥ {MIN_BREAK_RATIO}× the median of the {TREND_POINTS} loss points either "
            f"side, its neighbours within {ONE_STEP_FRACTION} of the excess, the gradient norm of "
            f"the same step ≥ {MIN_GRAD_RATIO}× its neighbours, after the first "
            f"{int(EARLY_FRACTION * 100)}% of the run"
        ),
    )
