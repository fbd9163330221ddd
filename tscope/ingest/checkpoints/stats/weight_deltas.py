"""How far one tensor moved between two consecutive checkpoints, and how its distribution shifted.

    delta_norm             ‖W_t − W_prev‖₂, in float64 chunk by chunk
    update_ratio_per_step  delta_norm / ‖W_prev‖₂ / (step_t − step_prev)
    norm_growth_rate       (‖W_t‖ / ‖W_prev‖) ** (1 / (step_t − step_prev)) − 1
    histogram_kl           KL(hist_t ‖ hist_prev) of the log-magnitude histograms, add-half smoothed

Why the source matters (`delta_source`). A bf16 checkpoint stores each weight rounded to 8
significant bits: one ulp is 2**-7 to 2**-8 of |w| (fp16: 2**-10 to 2**-11). When an element's true
change δ over the window is below an ulp, the stored value either stays or jumps a whole ulp (with
probability ≈ |δ|/ulp), so E[(Δw_bf16)²] ≈ |δ|·ulp, far above δ²: the measured ‖ΔW‖ grows like
√lr instead of lr, and the update ratio is biased upward by about √(ulp/|δ|) — most at small
learning rates and short windows. Above an ulp the bias fades into a noise floor of ≈ 2.3e-3·‖W‖
(two independent roundings, RMS ≈ 1.6e-3·|w| each). (A run trained in pure bf16 without master
weights also loses updates below half an ulp in training; those never reach the weights at all.)
fp32 master weights have neither problem, so they are used whenever both checkpoints hold them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tscope.ingest.checkpoints.stats.chunk_runner import ChunkRunner, Workspace, flat_view

if TYPE_CHECKING:
    import torch

NAN = math.nan
# Pseudo-count added to every histogram bin before the KL divergence, so that a bin empty in
# the previous checkpoint does not make it infinite (add-half, the Jeffreys prior).
HISTOGRAM_SMOOTHING = 0.5

_SHORT_DTYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}
# Significant bits per dtype: the coarser of the two checkpoints limits the diff's precision.
_SIGNIFICANT_BITS = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}


@dataclass(frozen=True)
class WeightDelta:
    delta_norm: float = NAN
    update_ratio_per_step: float = NAN
    norm_growth_rate: float = NAN
    histogram_kl: float = NAN
    delta_source: str | None = None  # None: no previous checkpoint holds this tensor


def delta_source_name(current_dtype: str, previous_dtype: str, master: bool) -> str:
    """`fp32_master`, or `weights_<dtype>` of the less precise of the two checkpoints."""
    if master:
        return "fp32_master"
    coarser = min((current_dtype, previous_dtype), key=lambda name: _SIGNIFICANT_BITS.get(name, 0))
    return "weights_" + _SHORT_DTYPE.get(coarser, coarser)


def histogram_kl(current: npt.NDArray[np.int64], previous: npt.NDArray[np.int64]) -> float:
    """KL(p ‖ q) in nats between two count histograms, each smoothed by HISTOGRAM_SMOOTHING."""
    if current.sum() == 0 or previous.sum() == 0:
        return NAN
    p = current.astype(np.float64) + HISTOGRAM_SMOOTHING
    q = previous.astype(np.float64) + HISTOGRAM_SMOOTHING
    p /= p.sum()
    q /= q.sum()
    return float(np.sum(p * np.log(p / q)))


def _delta_chunk(
    workspace: Workspace, current: torch.Tensor, previous: torch.Tensor
) -> tuple[float, float, float]:
    """(Σ(a − b)², Σa², Σb²) over one chunk, in float64."""
    import torch

    a = workspace.buffer("wide0", torch.float64, current.numel())
    a.copy_(current)  # widened: (chunk,) float64
    b = workspace.buffer("wide1", torch.float64, previous.numel())
    b.copy_(previous)
    current_sq = float(torch.dot(a, a))
    previous_sq = float(torch.dot(b, b))
    a.sub_(b)
    return float(torch.dot(a, a)), current_sq, previous_sq


def weight_delta(
    current: torch.Tensor,
    previous: torch.Tensor,
    steps: int | None,
    source: str,
    runner: ChunkRunner,
) -> WeightDelta:
    """Norms of W_t − W_prev, ratios per step, for one tensor (same shape in both checkpoints).

    NaN where either side has NaN/Inf (the non-finite count already says so), and ratios NaN when
    the steps between the checkpoints are unknown or not positive.
    """
    if current.shape != previous.shape:
        return WeightDelta(delta_source=source)
    delta_sq = current_sq = previous_sq = 0.0
    for part in runner.map(_delta_chunk, flat_view(current.detach()), flat_view(previous.detach())):
        delta_sq += part[0]
        current_sq += part[1]
        previous_sq += part[2]
    return delta_from_sums(delta_sq, current_sq, previous_sq, steps, source)


def delta_from_sums(
    delta_sq: float, current_sq: float, previous_sq: float, steps: int | None, source: str
) -> WeightDelta:
    """The WeightDelta of Σ(a − b)², Σa², Σb² (however they were summed)."""
    if not all(math.isfinite(v) for v in (delta_sq, current_sq, previous_sq)):
        return WeightDelta(delta_source=source)
    delta_norm = math.sqrt(delta_sq)
    previous_norm, current_norm = math.sqrt(previous_sq), math.sqrt(current_sq)
    ratio = growth = NAN
    if steps is not None and steps > 0 and previous_norm > 0:
        ratio = delta_norm / previous_norm / steps
        growth = (current_norm / previous_norm) ** (1.0 / steps) - 1.0
    return WeightDelta(delta_norm, ratio, growth, NAN, source)
