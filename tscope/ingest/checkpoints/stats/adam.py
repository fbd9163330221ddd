"""What Adam(W)'s saved state says about one parameter, chunk by chunk in float64.

With bias-corrected moments m̂ = m / (1 − β1^t) and v̂ = v / (1 − β2^t) (t = the parameter's step
counter, β and ε from its parameter group), AdamW's step is lr · m̂ / (√v̂ + ε):

* ε-dominance: the fraction of coordinates with √v̂ ≤ ε, among those that ever had a gradient.
  A coordinate whose v is exactly 0 never received one (the embedding row of a token absent from
  the data): ε sets its step only because there is nothing to step, so it is counted apart
  (`never_updated_share`) instead of as ε-dominated. There the denominator is mostly ε, the
  update shrinks towards lr · m̂ / ε, and Adam stops being scale-free (Wortsman et al. 2023, the
  update-RMS collapse; Molybog et al. 2023, gradients comparable to ε before divergence).
* update RMS: RMS of m̂ / (√v̂ + ε), the step size per unit of learning rate. Sign-like updates give
  ≈ 1; a collapse far below 1 is the ε-dominance symptom.

Σm², Σv² and Σupdate² are plain float64 dot products, redone scaled by a power of two where one
cannot be trusted (float64 states of extreme magnitude, or an update past 1e154 or below 1e-154:
its square leaves float64's range), as the weight deltas are (weight_deltas.square_sum).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tscope.ingest.checkpoints.stats.chunk_runner import ChunkRunner, Workspace, flat_view
from tscope.ingest.checkpoints.stats.tensor import _unscaled
from tscope.ingest.checkpoints.stats.weight_deltas import SquareSum, square_sum

if TYPE_CHECKING:
    import torch

NAN = math.nan


@dataclass(frozen=True)
class AdamStats:
    """One parameter's Adam state, summarized; NaN when absent or undefined."""

    exp_avg_norm: float = NAN  # ‖m‖₂
    exp_avg_sq_norm: float = NAN  # ‖v‖₂
    adam_step: float = NAN  # the parameter's step counter t
    eps_dominance: float = NAN  # among coordinates with v > 0: fraction with sqrt(v_hat) <= eps
    never_updated_share: float = NAN  # fraction of coordinates with v exactly 0 (no gradient ever)
    eps_dominated_max: float = NAN  # the largest sqrt(v_hat) among the eps-dominated coordinates
    update_rms: float = NAN  # RMS of m_hat / (sqrt(v_hat) + eps)


def parameter_group(
    param_groups: Sequence[Mapping[str, Any]], group_of: Mapping[str, int], name: str
) -> Mapping[str, Any] | None:
    """The hyper-parameters that apply to `name`; with a single group, that group."""
    index = group_of.get(name)
    if index is None and len(param_groups) == 1:
        index = 0
    if index is None or not 0 <= index < len(param_groups):
        return None
    return param_groups[index]


def _scalar(value: Any) -> float:
    """A step counter or hyper-parameter saved as a float, an int or a 0-d tensor."""
    try:
        return float(value)
    except (TypeError, ValueError, RuntimeError, OverflowError):  # text, a 2-value tensor, 10**400
        return NAN


def _bias_correction(beta: float, step: float) -> float:
    """1 − β^t for an Adam β in [0, 1) and a step ≥ 0, else NaN: a crafted β of 1e300 overflows,
    a negative one to a fractional power is complex."""
    if not (0.0 <= beta < 1.0 and step >= 0.0):
        return NAN
    return 1.0 - float(beta**step)


def _adam_chunk(
    workspace: Workspace,
    exp_avg: torch.Tensor,
    exp_avg_sq: torch.Tensor,
    *,
    correction1: float,
    correction2: float,
    eps: float,
) -> tuple[SquareSum, SquareSum, int, SquareSum, int, float]:
    """(Σm², Σv², coordinates with v > 0 and √v̂ ≤ ε, Σ update², coordinates with v = 0, the
    largest √v̂ among the ε-dominated ones or −1) over one chunk, in float64."""
    import torch

    moment = workspace.buffer("wide0", torch.float64, exp_avg.numel())
    moment.copy_(exp_avg)  # widened: (chunk,) float64
    second = workspace.buffer("wide1", torch.float64, exp_avg_sq.numel())
    second.copy_(exp_avg_sq)
    # Before the buffers are overwritten below: the scaled redo (rare) reads them.
    wide_m, wide_v = exp_avg.dtype == torch.float64, exp_avg_sq.dtype == torch.float64
    sum_m2 = _squares(moment, wide_m)
    sum_v2 = _squares(second, wide_v)
    never = int((second == 0).sum())
    if not math.isfinite(correction2):  # no step counter or no betas: norms only
        return sum_m2, sum_v2, 0, SquareSum(NAN), never, -1.0
    second.div_(correction2).sqrt_()  # √v̂
    is_dominated = (second <= eps) & (second > 0)
    dominated = int(is_dominated.sum())
    largest = float(second[is_dominated].max()) if dominated else -1.0
    second.add_(eps)
    moment.div_(correction1).div_(second)  # m̂ / (√v̂ + ε)
    # Any state dtype: an ε of 1e-300 makes a float32 state's update 1e292 (its square inf).
    return sum_m2, sum_v2, dominated, _squares(moment, True), never, largest


def _squares(values: torch.Tensor, wide: bool) -> SquareSum:
    """Σx² of a float64 buffer: its dot product, redone scaled where that cannot be trusted."""
    import torch

    return square_sum(float(torch.dot(values, values)), wide, values.numpy())


def adam_stats(
    state: Mapping[str, Any] | None,
    group: Mapping[str, Any] | None,
    runner: ChunkRunner,
) -> AdamStats:
    """Summarize one parameter's {"exp_avg", "exp_avg_sq", "step"} with its group's eps/betas."""
    if not state:
        return AdamStats()
    step = _scalar(state.get("step"))
    exp_avg, exp_avg_sq = state.get("exp_avg"), state.get("exp_avg_sq")
    if exp_avg is None or exp_avg_sq is None or exp_avg.shape != exp_avg_sq.shape:
        return AdamStats(adam_step=step)
    eps = _scalar(group.get("eps")) if group else NAN
    betas = group.get("betas") if group else None
    beta1 = beta2 = NAN
    if isinstance(betas, list | tuple) and len(betas) == 2:
        beta1, beta2 = _scalar(betas[0]), _scalar(betas[1])
    # Bias corrections 1 − β^t; NaN (norms only) without a usable step, betas or eps.
    correction1, correction2 = _bias_correction(beta1, step), _bias_correction(beta2, step)
    usable = step > 0 and math.isfinite(eps) and correction1 > 0 and correction2 > 0
    sum_m2 = sum_v2 = sum_update2 = SquareSum(0.0)
    dominated = never = 0
    dominated_max = NAN
    for part in runner.map(
        _adam_chunk,
        flat_view(exp_avg.detach()),
        flat_view(exp_avg_sq.detach()),
        correction1=correction1 if usable else NAN,
        correction2=correction2 if usable else NAN,
        eps=eps,
    ):
        sum_m2 = sum_m2.plus(part[0])
        sum_v2 = sum_v2.plus(part[1])
        dominated += part[2]
        sum_update2 = sum_update2.plus(part[3])
        never += part[4]
        if part[5] >= 0 and not dominated_max >= part[5]:  # NaN (none yet) or smaller
            dominated_max = part[5]
    numel = exp_avg.numel()
    with_gradient = numel - never
    return AdamStats(
        exp_avg_norm=sum_m2.root(),
        exp_avg_sq_norm=sum_v2.root(),
        adam_step=step,
        eps_dominance=dominated / with_gradient if usable and with_gradient else NAN,
        never_updated_share=never / numel if numel else NAN,
        eps_dominated_max=dominated_max if usable and dominated else NAN,
        update_rms=_rms(sum_update2, numel) if usable and numel else NAN,
    )


def _rms(squares: SquareSum, count: int) -> float:
    """√(Σx² / count); for plain sums math.sqrt(Σx² / count) exactly as before."""
    return _unscaled(math.sqrt(squares.value / count), squares.exponent)
