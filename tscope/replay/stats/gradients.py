"""Per-tensor and per-block gradient norms, and each step's update-to-weight ratio.

Statistics in context.layers (L2 norms, float32 per tensor, combined in float64):

    {tensor}: numel                  elements of the parameter tensor (only tensor entries have
                                     it: this is how a reader tells them from blocks)
              grad_norm              ‖g‖ of the accumulated gradient before clipping (unscaled when
                                     a GradScaler is passed): Σ grad_norm² over tensors = the
                                     logged pre-clip grad_norm²
              weight_norm            ‖W‖ before optimizer.step()
              delta_norm             ‖W_after − W_before‖ of this step's update
              update_ratio_per_step  delta_norm / weight_norm (the checkpoint layers table's name
                                     and meaning, for one step)
    {block}:  the four norms and ratio over all of the block's tensors (√Σ of squares)

Only parameters with a gradient this step are measured (frozen ones never move).

Memory: update ratios need W_before. It is copied into one flat buffer per (device, dtype),
allocated at the first step and reused: one extra copy of the trainable weights, in their own
dtype, on their own device — the only large allocation of the statistics. Pass
`update_ratio=False` to measure gradient norms only. The copy is read back as
W_before − W_after in place (exact in floating point for nearby values, Sterbenz), so no second
buffer is needed.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from tscope.model.replay_statistics import (
    DELTA_NORM,
    GRAD_NORM,
    UPDATE_RATIO,
    WEIGHT_NORM,
    ReplayStatistic,
)
from tscope.replay.observers import StepContext
from tscope.replay.stats.base import ObserverOptions, StatisticsObserver
from tscope.replay.stats.structure import block_of, transformer_blocks

if TYPE_CHECKING:
    import torch

NUMEL = "numel"


class GradientStatistics(StatisticsObserver):
    name = "gradients"
    statistics = (
        ReplayStatistic(GRAD_NORM, "Gradient norm", "L2 norm of the layer's gradient", True, True),
        ReplayStatistic(
            UPDATE_RATIO, "Update-to-weight ratio", "‖Δw‖ / ‖w‖ of the step's update", True, True
        ),
        ReplayStatistic(DELTA_NORM, "Update norm", "‖Δw‖ of the step's update", True),
        ReplayStatistic(WEIGHT_NORM, "Weight norm", "‖w‖ after the step", True),
    )

    @classmethod
    def for_replay(cls, options: ObserverOptions) -> GradientStatistics:
        return cls(update_ratio=options.update_ratio, grad_scaler=options.grad_scaler)

    def __init__(self, update_ratio: bool = True, grad_scaler: Any = None) -> None:
        super().__init__()
        self.update_ratio = update_ratio
        self.grad_scaler = grad_scaler  # torch.amp.GradScaler: gradients are scaled in on_backward
        self._names: list[str] = []
        self._parameters: list[torch.Tensor] = []
        self._grad_norms: torch.Tensor | None = None  # (n_tensors,) float32
        self._weight_norms: torch.Tensor | None = None  # (n_tensors,) float32
        self._snapshot = _WeightSnapshot()

    def on_backward(self, context: StepContext) -> None:
        import torch

        named = [(n, p) for n, p in context.model.named_parameters() if p.grad is not None]
        self._names = [name for name, _ in named]
        self._parameters = [parameter for _, parameter in named]
        if not named:
            self._grad_norms = self._weight_norms = None
            return
        with torch.no_grad():
            grads = [p.grad for p in self._parameters if p.grad is not None]
            norms = l2_norms(grads)
            scale = self._grad_scale()
            self._grad_norms = norms / scale if scale is not None else norms
            self._weight_norms = l2_norms(self._parameters) if self.update_ratio else None
            if self.update_ratio:
                self._snapshot.take(self._parameters)

    def on_step_end(self, context: StepContext) -> None:
        import torch

        super().on_step_end(context)
        if self._grad_norms is None:
            return
        with torch.no_grad():
            rows = [self._grad_norms]
            if self._weight_norms is not None:
                rows += [self._weight_norms, self._snapshot.delta_norms(self._parameters)]
            stacked = torch.stack(rows)
        blocks = [name for name, _ in transformer_blocks(context.model)]
        names = self._names
        numels = [float(parameter.numel()) for parameter in self._parameters]
        self._parameters = []  # no reference to the model between steps

        def receive(values: list[list[float]]) -> None:
            _fill(context.layers, names, values, blocks)
            for name, numel in zip(names, numels, strict=True):
                context.layers[name][NUMEL] = numel

        self.deliver(stacked, receive)

    def _grad_scale(self) -> torch.Tensor | None:
        scaler = self.grad_scaler
        if scaler is None or not getattr(scaler, "is_enabled", lambda: False)():
            return None
        # The scale tensor itself (no .item(): on a GPU that would wait for the device).
        scale = getattr(scaler, "_scale", None)
        if scale is None:
            import torch

            scale = torch.tensor(float(scaler.get_scale()))
        result: torch.Tensor = scale.float()
        return result


def l2_norms(tensors: list[torch.Tensor]) -> torch.Tensor:
    """(n,) float32 L2 norms on the first tensor's device: one fused call per device."""
    import torch

    by_device: dict[Any, list[int]] = {}
    for index, tensor in enumerate(tensors):
        by_device.setdefault(tensor.device, []).append(index)
    first = tensors[0].device
    result = torch.empty(len(tensors), dtype=torch.float32, device=first)
    for indices in by_device.values():
        norms = torch._foreach_norm([tensors[i] for i in indices], 2, dtype=torch.float32)
        stacked = torch.stack(list(norms)).to(first)
        if len(indices) == len(tensors):
            return stacked
        result[torch.tensor(indices, device=first)] = stacked
    return result


def _fill(
    layers: dict[str, dict[str, float]],
    names: list[str],
    values: list[list[float]],
    blocks: list[str],
) -> None:
    columns = [GRAD_NORM, WEIGHT_NORM, DELTA_NORM][: len(values)]
    squares: dict[str, list[float]] = {}  # block -> Σ of squares per column, float64
    for index, name in enumerate(names):
        row = {column: values[k][index] for k, column in enumerate(columns)}
        if WEIGHT_NORM in row:
            row[UPDATE_RATIO] = _ratio(row[DELTA_NORM], row[WEIGHT_NORM])
        layers.setdefault(name, {}).update(row)
        block = block_of(name, blocks)
        if block is not None:
            sums = squares.setdefault(block, [0.0] * len(columns))
            for k, column in enumerate(columns):
                sums[k] += row[column] * row[column]
    for block, sums in squares.items():
        row = {column: math.sqrt(total) for column, total in zip(columns, sums, strict=True)}
        if WEIGHT_NORM in row:
            row[UPDATE_RATIO] = _ratio(row[DELTA_NORM], row[WEIGHT_NORM])
        layers.setdefault(block, {}).update(row)


def _ratio(delta: float, weight: float) -> float:
    return delta / weight if weight > 0 else math.nan


class _WeightSnapshot:
    """W before optimizer.step() in one flat buffer per (device, dtype), reused across steps."""

    def __init__(self) -> None:
        self._signature: tuple[tuple[Any, ...], ...] = ()
        self._groups: list[tuple[list[int], list[torch.Tensor]]] = []  # (indices, buffer views)

    def take(self, parameters: list[torch.Tensor]) -> None:
        import torch

        signature = tuple((p.device, p.dtype, tuple(p.shape)) for p in parameters)
        if signature != self._signature:
            self._allocate(parameters)
            self._signature = signature
        for indices, views in self._groups:
            torch._foreach_copy_(views, [parameters[i].detach() for i in indices])

    def delta_norms(self, parameters: list[torch.Tensor]) -> torch.Tensor:
        """(n,) float32 ‖W_after − W_before‖, overwriting the snapshot with W_before − W_after."""
        import torch

        norms: list[torch.Tensor | None] = [None] * len(parameters)
        for indices, views in self._groups:
            torch._foreach_sub_(views, [parameters[i].detach() for i in indices])
            for i, norm in zip(
                indices, torch._foreach_norm(views, 2, dtype=torch.float32), strict=True
            ):
                norms[i] = norm
        first = parameters[0].device
        return torch.stack([n.to(first) for n in norms if n is not None])

    def _allocate(self, parameters: list[torch.Tensor]) -> None:
        import torch

        self._groups = []
        grouped: dict[tuple[Any, Any], list[int]] = {}
        for index, parameter in enumerate(parameters):
            grouped.setdefault((parameter.device, parameter.dtype), []).append(index)
        for (device, dtype), indices in grouped.items():
            sizes = [parameters[i].numel() for i in indices]
            buffer = torch.empty(sum(sizes), dtype=dtype, device=device)
            views = [
                chunk.view(parameters[i].shape)
                for chunk, i in zip(buffer.split_with_sizes(sizes), indices, strict=True)
            ]
            self._groups.append((indices, views))
