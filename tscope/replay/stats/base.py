"""What every statistics observer shares: a name, notes, module hooks, the micro-batch index.

A statistics observer only reads. Hooks compute under torch.no_grad on detached tensors, keep
their results as device tensors, and the observer converts them once per step (one device→host
transfer in on_step_end), so a GPU replay is not serialised by a `.item()` per hook.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from tscope.replay.observers import StepContext, StepObserver

if TYPE_CHECKING:
    import torch
    from torch.utils.hooks import RemovableHandle

# context.extras key: one line per thing an observer could not measure, prefixed by its name.
NOTES_KEY = "statistics_notes"


class StatisticsObserver(StepObserver):
    """Base of the observers in tscope.replay.stats: `name` identifies it in the registry."""

    name: ClassVar[str] = "statistics"

    def __init__(self) -> None:
        self.notes: list[str] = []  # everything this observer skipped, each reason once
        self._handles: list[RemovableHandle] = []
        self._micro_index = 0  # the micro-batch whose forward/backward runs now

    def applies(self, model: torch.nn.Module) -> bool:
        """False when the model has nothing this observer measures (the registry leaves it out)."""
        return True

    def note(self, context: StepContext, text: str) -> None:
        """Record why something was not measured: once per observer, in that step's extras."""
        if text in self.notes:
            return
        self.notes.append(text)
        context.extras.setdefault(NOTES_KEY, []).append(f"{self.name}: {text}")

    def on_step_start(self, context: StepContext) -> None:
        self.remove_hooks()  # a step that raised never reached on_step_end
        self._micro_index = 0

    def on_micro_batch(self, context: StepContext, index: int, per_sample: torch.Tensor) -> None:
        self._micro_index = index + 1

    def on_step_end(self, context: StepContext) -> None:
        self.remove_hooks()

    def forward_hook(
        self, module: torch.nn.Module, hook: Callable[[torch.nn.Module, Any, Any], None]
    ) -> None:
        self._handles.append(module.register_forward_hook(hook))

    def remove_hooks(self) -> None:
        for handle in self._handles:
            handle.remove()
        self._handles.clear()

    def close(self) -> None:
        """Undo everything the observer installed; safe to call twice or after a failed step."""
        self.remove_hooks()


def first_tensor(output: Any) -> torch.Tensor | None:
    """The module output a statistic describes: the tensor itself, or a tuple's first tensor
    (HF decoder layers return (hidden_states, ...)), or a ModelOutput's first value."""
    import torch

    if isinstance(output, torch.Tensor):
        return output
    if isinstance(output, (tuple, list)):
        values: Any = output
    elif isinstance(output, dict):
        values = output.values()
    else:
        return None
    for value in values:
        if isinstance(value, torch.Tensor):
            return value
    return None


def floating_tensors(output: Any) -> list[torch.Tensor]:
    """Every floating-point tensor directly in a module output (tensor, tuple, list or dict)."""
    import torch

    if isinstance(output, torch.Tensor):
        values: Any = (output,)
    elif isinstance(output, (tuple, list)):
        values = output
    elif isinstance(output, dict):
        values = output.values()
    else:
        return []
    return [v for v in values if isinstance(v, torch.Tensor) and v.is_floating_point()]


def nan_max(first: float, second: float) -> float:
    """max() in which NaN wins: one non-finite micro-batch must not hide behind a finite one."""
    if math.isnan(first) or math.isnan(second):
        return math.nan
    return max(first, second)
