"""Where NaN/Inf first appeared in a step: the module, the phase, the micro-batch.

Each module's forward output, and the gradient that reaches each module output in backward, is
reduced to its minimum and maximum (torch.aminmax: one pass, no copy; both are finite exactly
when every element is, and NaN propagates); the values stay on the device in execution order and
are read once at the end of the step. Cost when all is finite: one reduction per module output,
per pass. Parameter gradients are checked through their L2 norms (non-finite when an element is,
or when the norm itself overflows float32).

In context.extras (absent when everything was finite):

    nonfinite_origin    the earliest of the two below
    nonfinite_forward   {phase: "forward", module, micro_batch}: the first module to finish a
                        forward with a non-finite output. Hooks fire when a module returns, so a
                        child reports before its parent: the innermost module is named (the root
                        model is "(model)").
    nonfinite_backward  {phase: "backward", module, received_by, micro_batch}: backward order.
                        `received_by` is the first module whose output gradient was non-finite;
                        `module` is the module whose output gradient arrived just before it, still
                        finite — the backward of that module (and of any operations between the
                        two) turned a finite gradient into a non-finite one. "(loss)" when the
                        gradient of the first module reached was already non-finite. Exact along a
                        chain of modules; where a tensor feeds several modules, `module` is the
                        last of them to run backward (an approximation).
    nonfinite_grads     names of parameters whose accumulated gradient holds NaN/Inf

In context.layers: {module: {"nonfinite_forward": 1.0}} / {"nonfinite_backward": 1.0} for the
origins, {parameter: {"grad_nonfinite": 1.0}} for each parameter with a non-finite gradient.
"""

from __future__ import annotations

from functools import partial
from typing import TYPE_CHECKING, Any

from tscope.model.replay_statistics import NONFINITE_BACKWARD, NONFINITE_FORWARD
from tscope.replay.observers import StepContext
from tscope.replay.stats.base import StatisticsObserver, floating_tensors
from tscope.replay.stats.gradients import l2_norms

if TYPE_CHECKING:
    import torch

FORWARD = "forward"
BACKWARD = "backward"
ROOT_NAME = "(model)"
LOSS_NAME = "(loss)"
FORWARD_FLAG = NONFINITE_FORWARD
BACKWARD_FLAG = NONFINITE_BACKWARD
GRAD_FLAG = "grad_nonfinite"


class NonfiniteOrigin(StatisticsObserver):
    name = "nonfinite"

    def __init__(self) -> None:
        super().__init__()
        self._modules: list[str] = []
        # (micro-batch, module index) per event; the max |x| tensors in the same order
        self._forward_events: list[tuple[int, int]] = []
        self._forward_values: list[torch.Tensor] = []
        self._backward_events: list[tuple[int, int]] = []
        self._backward_values: list[torch.Tensor] = []
        self._grad_names: list[str] = []
        self._grad_values: torch.Tensor | None = None
        # The tensor checked last: a parent module returning its last child's output unchanged
        # (an MLP ending in dropout) is not checked twice. A reference, so its id is not reused.
        self._last_checked: torch.Tensor | None = None

    def on_step_start(self, context: StepContext) -> None:
        super().on_step_start(context)
        self._forward_events, self._forward_values = [], []
        self._backward_events, self._backward_values = [], []
        self._grad_names, self._grad_values = [], None
        self._last_checked = None
        self._modules = []
        for index, (name, module) in enumerate(context.model.named_modules()):
            self._modules.append(name or ROOT_NAME)
            self.forward_hook(module, partial(self._forward, index))

    def _forward(self, index: int, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        import torch

        micro = self._micro_index
        for tensor in floating_tensors(output):
            if tensor.numel() == 0 or tensor is self._last_checked:
                continue
            self._last_checked = tensor
            with torch.no_grad():
                self._forward_values.extend(torch.aminmax(tensor.detach()))
            self._forward_events.append((micro, index))
            if tensor.requires_grad and torch.is_grad_enabled():
                hook = partial(self._backward, micro, index)
                tensor.register_hook(hook)  # type: ignore[no-untyped-call]

    def _backward(self, micro: int, index: int, grad: torch.Tensor) -> None:
        import torch

        if grad.numel() == 0:
            return
        with torch.no_grad():
            self._backward_values.extend(torch.aminmax(grad.detach()))
        self._backward_events.append((micro, index))

    def on_micro_batch(self, context: StepContext, index: int, per_sample: torch.Tensor) -> None:
        super().on_micro_batch(context, index, per_sample)
        self._last_checked = None

    def on_backward(self, context: StepContext) -> None:
        import torch

        named = [(n, p.grad) for n, p in context.model.named_parameters() if p.grad is not None]
        if not named:
            return
        self._grad_names = [name for name, _ in named]
        with torch.no_grad():
            grads = [grad.detach() for _, grad in named if grad is not None]
            self._grad_values = l2_norms(grads)

    def on_step_end(self, context: StepContext) -> None:
        import torch

        super().on_step_end(context)
        self._last_checked = None
        parts = [_stack(v) for v in (self._forward_values, self._backward_values) if v]
        if self._grad_values is not None:
            parts.append(self._grad_values)
        if not parts:
            return
        device = parts[0].device
        flat = torch.cat([p.reshape(-1).to(device) for p in parts])
        # Forward and backward values come in (min, max) pairs: an event is finite if both are.
        forward_end = len(self._forward_values)
        backward_end = forward_end + len(self._backward_values)
        self._forward_values, self._backward_values, self._grad_values = [], [], None

        def receive(finite: list[bool]) -> None:
            forward = _pairs(finite[:forward_end])
            backward = _pairs(finite[forward_end:backward_end])
            self._report(context, forward, backward, finite[backward_end:])

        self.deliver(torch.isfinite(flat), receive)

    def _report(
        self, context: StepContext, forward: list[bool], backward: list[bool], grads: list[bool]
    ) -> None:
        origins = []
        if False in forward:
            at = forward.index(False)
            micro, index = self._forward_events[at]
            name = self._modules[index]
            record = {"phase": FORWARD, "module": name, "micro_batch": micro}
            context.extras[FORWARD_FLAG] = record
            context.layers.setdefault(name, {})[FORWARD_FLAG] = 1.0
            origins.append((micro, 0, record))
        if False in backward:
            at = backward.index(False)
            micro, index = self._backward_events[at]
            before = self._backward_events[at - 1] if at > 0 else None
            producer = LOSS_NAME
            if before is not None and before[0] == micro:
                producer = self._modules[before[1]]
            record = {
                "phase": BACKWARD,
                "module": producer,
                "received_by": self._modules[index],
                "micro_batch": micro,
            }
            context.extras[BACKWARD_FLAG] = record
            if producer != LOSS_NAME:
                context.layers.setdefault(producer, {})[BACKWARD_FLAG] = 1.0
            origins.append((micro, 1, record))
        if origins:
            context.extras["nonfinite_origin"] = min(origins, key=lambda o: (o[0], o[1]))[2]
        bad = [name for name, ok in zip(self._grad_names, grads, strict=True) if not ok]
        if bad:
            context.extras["nonfinite_grads"] = bad
            for name in bad:
                context.layers.setdefault(name, {})[GRAD_FLAG] = 1.0


def _pairs(flags: list[bool]) -> list[bool]:
    return [a and b for a, b in zip(flags[::2], flags[1::2], strict=True)]


def _stack(values: list[torch.Tensor]) -> torch.Tensor:
    """(n,) float32 on the first value's device; module outputs may differ in dtype (autocast)
    and device (a model split over devices)."""
    import torch

    first = values[0]
    if all(v.dtype == first.dtype and v.device == first.device for v in values):
        return torch.stack(values).float()
    return torch.stack([v.float().to(first.device) for v in values])
