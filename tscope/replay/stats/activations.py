"""Activation statistics of each transformer block's output (the residual stream after it).

Statistics in context.layers[block] (float32 over every element of the block's output — the
first tensor of a tuple output — over all micro-batches of the step):

    activation_mean               mean
    activation_std                population standard deviation (ddof = 0)
    activation_max_abs            max |x|: a single outlier feature (Dettmers et al. 2022,
                                  "LLM.int8()") or a blow-up shows here first
    activation_excess_kurtosis    m4 / m2² − 3 (0 for a Gaussian): heavy tails, outlier features

With gradient accumulation, each micro-batch is measured on its own and pooled: mean, std
(law of total variance) and max_abs are exact over the step; the kurtosis is the
element-weighted mean of the micro-batches' kurtoses (exact for one micro-batch).
"""

from __future__ import annotations

import functools
import math
from functools import partial
from typing import TYPE_CHECKING, Any

from tscope.model.replay_statistics import ACTIVATION_MAX_ABS, ReplayStatistic
from tscope.replay.observers import StepContext
from tscope.replay.stats.base import StatisticsObserver, first_tensor, nan_max
from tscope.replay.stats.structure import transformer_blocks

if TYPE_CHECKING:
    import torch

MEAN = "activation_mean"
STD = "activation_std"
MAX_ABS = ACTIVATION_MAX_ABS
KURTOSIS = "activation_excess_kurtosis"
# Keeps the rescaled deviations' 4th powers away from float32 underflow for an all-zero output.
_TINY = 1e-30
# Deviations formed at a time: 16 Mi float32 values = 64 MiB of scratch, one chunk for most blocks.
CHUNK_ELEMENTS = 1 << 24


class ActivationStatistics(StatisticsObserver):
    name = "activations"
    statistics = (
        ReplayStatistic(MAX_ABS, "Largest activation", "max |output| of the module", False, True),
        ReplayStatistic(MEAN, "Activation mean", "mean of the module's output", False),
        ReplayStatistic(STD, "Activation spread", "standard deviation of the output", False),
        ReplayStatistic(
            KURTOSIS,
            "Activation excess kurtosis",
            "heavy tails of the output; 0 for a Gaussian",
            False,
        ),
    )

    def __init__(self) -> None:
        super().__init__()
        self._blocks: list[str] = []
        self._records: list[tuple[int, int, torch.Tensor]] = []  # (block, numel, (4,) stats)

    def on_step_start(self, context: StepContext) -> None:
        super().on_step_start(context)
        blocks = transformer_blocks(context.model)
        if not blocks:
            self.note(context, "no transformer blocks found (no nn.ModuleList of 2+ modules)")
        self._blocks = [name for name, _ in blocks]
        self._records = []
        for index, (_, module) in enumerate(blocks):
            self.forward_hook(module, partial(self._record, index))

    def _record(self, index: int, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        import torch

        tensor = first_tensor(output)
        if tensor is None or not tensor.is_floating_point() or tensor.numel() == 0:
            return
        with torch.no_grad():
            self._records.append((index, tensor.numel(), moments(tensor.detach())))

    def on_step_end(self, context: StepContext) -> None:
        import torch

        super().on_step_end(context)
        if not self._records:
            return
        records, blocks = self._records, self._blocks
        self._records = []

        def receive(values: list[list[float]]) -> None:
            pooled: dict[int, list[tuple[int, list[float]]]] = {}
            for (index, count, _), row in zip(records, values, strict=True):
                pooled.setdefault(index, []).append((count, row))
            for index, rows in pooled.items():
                context.layers.setdefault(blocks[index], {}).update(_pool(rows))

        self.deliver(torch.stack([stats for _, _, stats in records]), receive)


def moments(tensor: torch.Tensor) -> torch.Tensor:
    """(4,) float32: mean, std (ddof 0), max |x|, excess kurtosis of all elements.

    The deviations are divided by a bound on their magnitude before they are raised to the 4th
    power, so the sums cannot overflow float32 however large the activations grow. Only
    reductions with fast CPU kernels (mean, aminmax, sum, dot): vector_norm(x, 4) and var_mean
    cost 20-40× more per element there. Deviations are formed CHUNK_ELEMENTS at a time, so the
    scratch memory stays at 64 MiB however large the block output.
    """
    import torch

    flat = tensor.reshape(-1)  # (n,), a view of a contiguous output
    count = flat.numel()
    mean = torch.mean(flat, dtype=torch.float32)
    low, high = torch.aminmax(flat)
    max_abs = torch.maximum(high, -low).float()
    scale = (max_abs + mean.abs()).clamp_min(_TINY)  # ≥ max |x − mean|
    second = torch.zeros((), device=flat.device)  # Σ ((x − mean) / scale)²
    fourth = torch.zeros((), device=flat.device)  # Σ ((x − mean) / scale)⁴
    for start in range(0, count, CHUNK_ELEMENTS):
        part = flat[start : start + CHUNK_ELEMENTS].float()
        squares = (part - mean).div_(scale).square_()  # each ≤ 1
        second = second + squares.sum()
        fourth = fourth + torch.dot(squares, squares)
    second, fourth = second / count, fourth / count  # m2 / scale², m4 / scale⁴
    std = second.sqrt() * scale
    kurtosis = fourth / (second * second) - 3.0  # m4 / m2² − 3, the scale cancelled
    return torch.stack([mean, std, max_abs, kurtosis])


def _pool(rows: list[tuple[int, list[float]]]) -> dict[str, float]:
    total = sum(count for count, _ in rows)
    mean = sum(count * row[0] for count, row in rows) / total
    variance = sum(count * (row[1] ** 2 + (row[0] - mean) ** 2) for count, row in rows) / total
    return {
        MEAN: mean,
        STD: math.sqrt(variance) if variance >= 0 else math.nan,
        MAX_ABS: functools.reduce(nan_max, (row[2] for _, row in rows)),
        KURTOSIS: sum(count * row[3] for count, row in rows) / total,
    }
