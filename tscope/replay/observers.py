"""Extension points of the replay loop: observers that measure, interventions that change.

An observer sees each step at fixed points and may fill `context.layers` (per-layer statistics
that land in replay.json's per_step[].layers) or `context.extras`; it must not change the model,
the gradients or the optimizer, or the replay no longer reproduces the run. Forward-activation
statistics: register module hooks in on_step_start and remove them in on_step_end.

An intervention is a what-if: it changes a step's learning rate, batch or clipping threshold. A replay with one no
longer reproduces the log by design; the what-if compares it with a plain replay.

Both are plain classes with no-op defaults: override what you need.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

    from tscope.replay.entry import Entry
    from tscope.replay.loop import LoopSettings


@dataclass
class StepContext:
    step: int
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    micro_batches: list[Any]  # on the replay device, in the order they are trained
    num_samples: int  # rows over all micro-batches
    num_items: torch.Tensor | None  # the loss normaliser N, when the Trainer rule applies
    learning_rates: tuple[float, ...]  # every param group's rate for this step
    layers: dict[str, dict[str, float]] = field(default_factory=dict)
    extras: dict[str, Any] = field(default_factory=dict)
    per_sample_loss: list[torch.Tensor] = field(default_factory=list)  # one (rows,) per micro-batch
    loss: float | None = None  # set before on_step_end
    grad_norm: float | None = None  # pre-clip, set before on_step_end


class StepObserver:
    def bind(self, entry: Entry, settings: LoopSettings) -> None:
        """Called once after the restore, before the first step: the entry file and the loop's
        settings (device, loss path, normaliser) for observers that recompute losses."""

    def on_step_start(self, context: StepContext) -> None:
        """Before the first forward of the step (learning rates already set)."""

    def on_micro_batch(self, context: StepContext, index: int, per_sample: torch.Tensor) -> None:
        """After micro-batch `index`'s backward; `per_sample` is its detached (rows,) losses."""

    def on_backward(self, context: StepContext) -> None:
        """Every micro-batch's gradient accumulated, before unscaling and clipping: per-parameter
        norms here add up to the logged pre-clip grad_norm."""

    def on_step_end(self, context: StepContext) -> None:
        """After optimizer.step(), gradients cleared."""


class Intervention:
    """A what-if. `name` and `params` identify it in replay.json's interventions."""

    name = "intervention"

    @property
    def params(self) -> dict[str, Any]:
        return {}

    def learning_rate(self, step: int, lr: float) -> float:
        """Group 0's rate for `step` (other groups keep their ratio)."""
        return lr

    def batch(self, step: int, item: Any) -> Any:
        """The step's batch item (a batch, or a list of micro-batches)."""
        return item

    def skips_update(self, step: int) -> bool:
        """True: the step's batch is evaluated but not trained on (no backward, no update), as a
        training loop that skips a listed batch does."""
        return False

    def max_grad_norm(self, step: int, max_norm: float | None) -> float | None:
        """The gradient-clipping threshold for `step` (None: the run did not clip)."""
        return max_norm
