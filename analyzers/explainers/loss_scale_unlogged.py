"""loss_scale_collapse with the scale not logged: the gradient norm non-finite at every step to the
end of the log while the loss holds its level.

A step whose gradients are non-finite either applies them (the weights go NaN, and every later
loss with them) or skips the update. A loss that keeps its level, step after step, means the
weights stopped changing: every update is skipped. Skipping on non-finite gradients is what fp16
dynamic loss scaling does (torch.amp.GradScaler.step, DeepSpeed's and Megatron's fp16
optimizers): on each overflow it skips the step and halves the scale, and when every step
overflows the halving never ends (loss_scale.py reads that from a logged scale). A blind set's
plain fp16 loop (session 30) logged its scale under a name tscope did not know then; with it
unread, the run read "the loss became NaN at step 236" while its loss held ~2.3 to the end.

The rule, from the logs alone; each condition is needed:
- no loss scale is logged (loss_scale.py judges a logged one) and no producer that logs
  something else in place of a NaN loss (the Trainer's filter: signals.hides_nonfinite_loss);
- the gradient norm is non-finite at every logged point from some step to the end of the log,
  MIN_DEAD_POINTS points or more (a scaler's occasional skip is finite again at the next step);
- the loss logged through that stretch is finite and at its level (signals.loss_level_held: its
  median within 1.5x of the median of the 20 points before).
"""

from __future__ import annotations

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.loss_scale import MANY_SKIPPED_STEPS
from tscope.analyzers.signals import (
    HELD_LEVEL_POINTS,
    dead_gradient_from,
    fmt,
    hides_nonfinite_loss,
    last_finite,
    loss_level_held,
    primary_loss,
)
from tscope.model import Finding
from tscope.model.metric_names import GRAD_NORM, LOSS_SCALE

# The stretch of non-finite gradient norms to the end: as many points as loss_scale.py calls
# many skipped steps.
MIN_DEAD_POINTS = MANY_SKIPPED_STEPS


class UnloggedLossScaleExplainer:
    name = "loss_scale_unlogged"
    categories: tuple[str, ...] = ("loss_scale_collapse",)
    defines = ()  # declared by loss_scale.py

    def run(self, evidence: Evidence) -> list[Finding]:
        run = evidence.run
        loss = primary_loss(run)
        if loss is None or run.has(LOSS_SCALE) or hides_nonfinite_loss(run):
            return []
        dead_from = dead_gradient_from(run)
        grad_steps = run.series(GRAD_NORM)[0]
        if dead_from is None or grad_steps.size - dead_from < MIN_DEAD_POINTS:
            return []
        first_dead = int(grad_steps[dead_from])
        steps, values = run.series(loss)
        stretch = np.flatnonzero(steps >= first_dead)
        if stretch.size < 2 or not loss_level_held(values, stretch):
            return []
        before = float(np.median(last_finite(values, int(stretch[0]), HELD_LEVEL_POINTS)))
        since = float(np.median(values[stretch[1:]]))
        dead_points = int(grad_steps.size - dead_from)
        return [
            Finding(
                category="loss_scale_collapse",
                severity="critical",
                confidence=0.7,
                step=first_dead,
                layer=None,
                message=(
                    f"The gradient norm is non-finite at every logged step from {first_dead} to "
                    f"the end of the log ({dead_points} points), while {loss} held its level "
                    f"(median {fmt(before)} before, {fmt(since)} since): the weights stopped "
                    "changing, so no update has been applied since. That is an fp16 loss scaler "
                    "skipping every step: each overflow skips the update and halves the scale, "
                    "and when every step overflows the halving never ends. The scale is not "
                    "logged; logging it would confirm."
                ),
                evidence={
                    "first_nonfinite_grad_step": first_dead,
                    "nonfinite_grad_points": dead_points,
                    "loss_median_before": before,
                    "loss_median_since": since,
                },
                suggestion=(
                    f"Restart from a checkpoint before step {first_dead}; train in bf16 if the "
                    "hardware allows, or find the op whose fp16 gradient overflows (a layer "
                    "whose activations grow). Log the scaler's scale (GradScaler.get_scale())."
                ),
                threshold=(
                    f"gradient norm non-finite for ≥ {MIN_DEAD_POINTS} points to the end, loss "
                    "finite and within 1.5× of its level before, no loss scale logged"
                ),
            )
        ]
