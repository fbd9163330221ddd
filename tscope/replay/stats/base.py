"""What every statistics observer shares: a name, notes, module hooks, the micro-batch index.

A statistics observer only reads. Hooks compute under torch.no_grad on detached tensors and keep
their results as device tensors. In on_step_end each observer hands the step's tensors to
`deliver`; under a StatisticsSuite (the replay's) they are all sent to the host together by one
HostTransfer after the last observer's on_step_end: one device sync per step for every statistic,
where each observer's own `.tolist()` cost one sync per observer per step (7 on a GPU run with
all of them). An observer used on its own transfers at once.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from tscope.model.replay_statistics import ReplayStatistic
from tscope.replay.observers import StepContext, StepObserver

if TYPE_CHECKING:
    import torch
    from torch.utils.hooks import RemovableHandle

# context.extras key: one line per thing an observer could not measure, prefixed by its name.
NOTES_KEY = "statistics_notes"


class HostTransfer:
    """Device tensors of one step, copied to the host in one transfer (one device sync).

    Each tensor comes back as its own `tensor.tolist()` would give it: the tensors are flattened
    into one float64 buffer on the first tensor's device (float32 on MPS, which has no float64)
    and read back with one `.tolist()`; each slice is nested to its shape and typed as its dtype
    (bool, int, float). The float64 detour is exact for float16/bfloat16/float32/float64, bool
    and integers below 2**53 (float32 on MPS: below 2**24).
    """

    def __init__(self) -> None:
        self._requests: list[tuple[torch.Tensor, Callable[[Any], None]]] = []
        self.transfers = 0  # device→host copies made: a test hook counting device syncs

    def request(self, tensor: torch.Tensor, receive: Callable[[Any], None]) -> None:
        self._requests.append((tensor.detach(), receive))

    def run(self) -> None:
        """Transfer every requested tensor, then call the receivers in request order."""
        import torch

        requests, self._requests = self._requests, []
        if not requests:
            return
        first = requests[0][0].device
        common = torch.float32 if first.type == "mps" else torch.float64
        with torch.no_grad():
            flat = torch.cat([t.reshape(-1).to(device=first, dtype=common) for t, _ in requests])
        values = flat.tolist()  # the step's one device→host transfer
        self.transfers += 1
        offset = 0
        for tensor, receive in requests:
            size = tensor.numel()
            cast = _python_type(tensor)
            part = [cast(v) for v in values[offset : offset + size]]
            offset += size
            receive(_nest(part, list(tensor.shape)))


def _python_type(tensor: torch.Tensor) -> Callable[[float], Any]:
    if tensor.dtype.is_floating_point:
        return float
    return bool if tensor.dtype == _bool_dtype() else int


def _bool_dtype() -> Any:
    import torch

    return torch.bool


def _nest(values: list[Any], shape: list[int]) -> Any:
    """`values` (row-major) as the nested lists of a tensor of `shape` (a scalar for ())."""
    if not shape:
        return values[0]
    if len(shape) == 1:
        return values
    step = len(values) // shape[0] if shape[0] else 0
    return [_nest(values[i * step : (i + 1) * step], shape[1:]) for i in range(shape[0])]


@dataclass(frozen=True)
class ObserverOptions:
    """What statistics_observers() hands every observer it builds."""

    config: Any = None  # the model's config when `model.config` is missing
    grad_scaler: Any = None  # the restored torch.amp.GradScaler (gradients arrive scaled)
    update_ratio: bool = True  # False: no snapshot of the weights, no update ratio


class StatisticsObserver(StepObserver):
    """Base of the observers in tscope.replay.stats: `name` identifies it in the registry;
    `statistics` describes what it writes into each step's `layers` (title, unit, axis), read by
    the renderers through the case's replay section. A name it writes without one (one per
    expert) is titled from the name itself."""

    name: ClassVar[str] = "statistics"
    statistics: ClassVar[tuple[ReplayStatistic, ...]] = ()

    def __init__(self) -> None:
        self.notes: list[str] = []  # everything this observer skipped, each reason once
        self._handles: list[RemovableHandle] = []
        self._micro_index = 0  # the micro-batch whose forward/backward runs now
        self.host: HostTransfer | None = None  # set by the suite: one transfer for all observers

    @classmethod
    def for_replay(cls, options: ObserverOptions) -> StatisticsObserver:
        """The observer for one replay (the registry builds each this way); an observer that
        needs the model's config or the restored scaler overrides this."""
        return cls()

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

    def deliver(self, tensor: torch.Tensor, receive: Callable[[Any], None]) -> None:
        """`receive(tensor.tolist())`: with the suite's other statistics in one transfer after
        every observer's on_step_end, or now when the observer runs on its own."""
        if self.host is None:
            receive(tensor.tolist())
        else:
            self.host.request(tensor, receive)

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
