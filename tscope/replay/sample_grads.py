"""Each sample's gradient at one optimizer step: its norm and its share of the step's gradient.

The gradient of sample i is that of its contribution to the loss the loop backpropagates,
loss_i / S (losses.py: loss_i = S · Σ_t CE_i,t / D, D the step's normaliser, S its samples), so
Σ_i g_i is the step's gradient G. share_i = ⟨g_i, G⟩ / ‖G‖²: the shares add up to 1 and say how
much of the step's update each sample drove (negative: it pulled the other way).

Three ways, tried in order, all at the pre-update weights and through `torch.func.functional_call`
on detached copies of the parameters, so `.grad`, the weights and every parameter hook are left
alone:

- "vmap": `vmap(grad_and_value(loss of one row))` over chunks of rows (rows are independent);
- "per_row": the same one-row loss with plain autograd, row by row, when vmap fails (an op
  without a batching rule, a hook calling .item(), out of memory);
- "batch_jacobian": one forward of the whole micro-batch and one backward per row, when the
  one-row losses are not the loop's per-sample losses (a loss_fn normalising by its own batch,
  layers mixing rows such as batch norm). Exact, and R times a backward: the last resort.
"""

from __future__ import annotations

import math
import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tscope.replay.isolation import HookSnapshot, hooks_suspended, set_rng
from tscope.replay.sample_losses import (
    LossSpec,
    loss_autocast,
    row_leaves,
    sample_losses,
    wrap_loss,
)

if TYPE_CHECKING:
    import torch

VMAP = "vmap"
PER_ROW = "per_row"
BATCH_JACOBIAN = "batch_jacobian"
# Memory allowed for one chunk of per-sample gradients. A row costs parameters × 4 bytes (float32)
# about GRAD_COPIES times over; activations come on top. On the CPU 1 GiB: all 24 rows of the
# fixture model (13.6k parameters), 2 rows of a 124M-parameter GPT-2. On a GPU a quarter of the
# free memory: measured on an H200, 8 rows × 256 tokens of that GPT-2 took 481 ms one row at a
# time and 89 ms in one chunk (peak 12 GiB), against 46 ms for the step's forward and backward.
CPU_CHUNK_BYTES = 1 << 30
GPU_FREE_MEMORY_FRACTION = 0.25
GRAD_COPIES = 3  # the chunk's gradients, their float32 copies, the products for norms and dots
# A one-row recomputation of the loop's per-sample loss differs from it by float rounding of
# another batch shape (≤ 4e-3 under bf16 autocast, 2⁻⁸); a loss normalised by its own batch is
# off by a factor of about the batch's rows or tokens. Beyond this the batch Jacobian is used.
ROW_SLICE_REL_TOL = 1e-2
# Σ g_i must give the accumulated gradient to this, else the batch Jacobian recomputes the step:
# exact float32 paths agree to ~1e-7 (summation order), one-row dropout masks miss by ~0.5.
SUM_REL_TOL = 1e-4
# Under autocast rounding alone misses by ~2e-3 (measured: a 2-layer GPT-2 under bf16, where the
# batch Jacobian misses by the same): five times bf16's rounding unit 2⁻⁸.
AUTOCAST_SUM_REL_TOL = 2e-2


@dataclass(frozen=True)
class PerSampleGradients:
    losses: tuple[float, ...]  # recomputed per-sample losses; mean = the step loss
    norms: tuple[float, ...]  # ‖g_i‖, L2 over every trainable parameter
    shares: tuple[float, ...]  # ⟨g_i, G⟩ / ‖G‖²
    method: str  # VMAP, PER_ROW or BATCH_JACOBIAN (the last one any micro-batch needed)
    sum_rel_diff: float  # ‖Σ g_i − G‖ / ‖G‖ against the accumulated .grad: ~1e-7 when exact
    checked: bool  # sum_rel_diff within the tolerance of the step's precision
    loss_rel_diff: float  # max |recomputed − loop| / max |loop| over the per-sample losses
    seconds: float
    notes: tuple[str, ...] = ()


def per_sample_gradients(
    model: torch.nn.Module,
    micro_batches: Sequence[Any],
    loop_losses: Sequence[torch.Tensor],
    spec: LossSpec,
    hooks_before_step: HookSnapshot | None = None,
    rng_before: Sequence[Any] | None = None,
    chunk_bytes: int | None = None,
) -> PerSampleGradients:
    """Per-sample gradient norms and shares at on_backward time (gradients accumulated, weights
    not yet stepped). `loop_losses`: the loop's detached per-sample losses, one (rows,) per
    micro-batch; `rng_before[j]`: the RNG state before micro-batch j's forward (dropout masks
    for the batch Jacobian); `hooks_before_step`: hook_snapshot() at the step's start;
    `chunk_bytes`: memory for one vmap chunk (default: CPU_CHUNK_BYTES, or a share of a GPU's
    free memory)."""
    import torch

    started = time.perf_counter()
    params: dict[str, torch.Tensor] = {n: p for n, p in model.named_parameters() if p.requires_grad}
    scale = spec.grad_scale or 1.0
    reference = {
        n: (p.grad.detach().float() / scale if p.grad is not None else torch.zeros_like(p).float())
        for n, p in params.items()
    }
    device = next(iter(params.values())).device
    budget = chunk_bytes if chunk_bytes is not None else _chunk_budget(device)
    rng_devices = [device.index or 0] if device.type == "cuda" else []
    with (
        hooks_suspended(model, hooks_before_step),
        torch.random.fork_rng(devices=rng_devices),
        warnings.catch_warnings(),
    ):
        # vmap's fallback for ops without a batching rule is correct, only slower.
        warnings.filterwarnings("ignore", message=".*batching rule.*")

        def every_micro_batch(jacobian: bool) -> list[_Rows]:
            return [
                _micro_batch(
                    model,
                    params,
                    batch,
                    loop_losses[index].detach().float().reshape(-1),
                    spec,
                    reference,
                    rng_before[index] if rng_before is not None else None,
                    budget,
                    jacobian,
                )
                for index, batch in enumerate(micro_batches)
            ]

        tolerance = SUM_REL_TOL if spec.autocast_dtype is None else AUTOCAST_SUM_REL_TOL
        parts = every_micro_batch(jacobian=False)
        miss = _sum_rel_diff(parts, reference)
        if miss > tolerance and any(part.method != BATCH_JACOBIAN for part in parts):
            parts = every_micro_batch(jacobian=True)
            parts[0].notes.insert(
                0,
                f"one-row gradients missed the step's gradient by {miss:.1e} (dropout, rows "
                "that interact): batch Jacobian",
            )
            miss = _sum_rel_diff(parts, reference)
    reference_sq = sum(float((g * g).sum()) for g in reference.values())
    recomputed = torch.cat([part.values for part in parts]) * spec.num_samples  # (S,)
    loop_all = torch.cat([t.detach().float().reshape(-1) for t in loop_losses]).to(device)
    dots = torch.cat([part.dots for part in parts])  # (S,)
    return PerSampleGradients(
        losses=tuple(recomputed.tolist()),
        norms=tuple(torch.cat([part.norms for part in parts]).sqrt().tolist()),
        shares=tuple((dots / reference_sq).tolist()) if reference_sq > 0 else (),
        method=max((part.method for part in parts), key=(VMAP, PER_ROW, BATCH_JACOBIAN).index),
        sum_rel_diff=miss,
        checked=miss <= tolerance,
        loss_rel_diff=_rel_diff(recomputed, loop_all),
        seconds=time.perf_counter() - started,
        notes=tuple(note for part in parts for note in part.notes),
    )


def _sum_rel_diff(parts: Sequence[_Rows], reference: dict[str, torch.Tensor]) -> float:
    """‖Σ g_i − G‖ / ‖G‖ over every row of the step; NaN when G is zero."""
    diff_sq = reference_sq = 0.0
    for name, grad in reference.items():
        total = sum((part.total[name] for part in parts[1:]), parts[0].total[name])
        diff_sq += float(((total - grad) ** 2).sum())
        reference_sq += float((grad * grad).sum())
    return math.sqrt(diff_sq / reference_sq) if reference_sq > 0 else math.nan


@dataclass
class _Rows:
    values: torch.Tensor  # (rows,) each row's contribution loss_i / S
    norms: torch.Tensor  # (rows,) ‖g_i‖²
    dots: torch.Tensor  # (rows,) ⟨g_i, G⟩
    total: dict[str, torch.Tensor]  # Σ g_i over the rows, float32
    method: str
    notes: list[str]


def _micro_batch(
    model: torch.nn.Module,
    params: dict[str, torch.Tensor],
    batch: Any,
    loop: torch.Tensor,
    spec: LossSpec,
    reference: dict[str, torch.Tensor],
    rng_state: Any,
    chunk_bytes: int,
    jacobian: bool,
) -> _Rows:
    losses = sample_losses(spec, batch)
    if jacobian:
        return _jacobian_rows(model, params, batch, losses, spec, reference, rng_state)
    rows = loop.numel()
    notes: list[str] = []
    try:
        result = _vmap_rows(model, params, batch, rows, losses, spec, reference, chunk_bytes)
    except Exception as error:  # any op or hook vmap cannot batch: the row loop computes the same
        notes.append(f"vmap failed ({type(error).__name__}: {_first_line(error)}); per-row loop")
        result = _loop_rows(model, params, batch, rows, losses, spec, reference)
    if _rel_diff(result.values * spec.num_samples, loop.to(result.values.device)) > (
        ROW_SLICE_REL_TOL
    ):
        notes.append(
            "one-row losses differ from the loop's per-sample losses (a loss normalised by its "
            "batch, or rows that interact): batch Jacobian"
        )
        result = _jacobian_rows(model, params, batch, losses, spec, reference, rng_state)
    result.notes = notes + result.notes
    return result


def _vmap_rows(
    model: torch.nn.Module,
    params: dict[str, torch.Tensor],
    batch: Any,
    rows: int,
    losses: Callable[[torch.nn.Module, Any], torch.Tensor],
    spec: LossSpec,
    reference: dict[str, torch.Tensor],
    chunk_bytes: int,
) -> _Rows:
    import torch
    from torch.func import functional_call, grad_and_value, vmap

    leaves, rebuild = row_leaves(batch, rows)
    wrapper = wrap_loss(model, losses)
    detached = {f"model.{n}": p.detach() for n, p in params.items()}

    def one_row(weights: dict[str, torch.Tensor], *row: torch.Tensor) -> torch.Tensor:
        one = rebuild([leaf.unsqueeze(0) for leaf in row])  # every leaf (1, ...)
        with loss_autocast(spec, row[0].device if row else None):
            per_sample: torch.Tensor = functional_call(wrapper, weights, (one,))  # (1,)
        return per_sample[0].float() / spec.num_samples

    step = vmap(grad_and_value(one_row), in_dims=(None, *[0] * len(leaves)), randomness="different")
    numel = sum(p.numel() for p in params.values())
    chunk = max(1, min(rows, chunk_bytes // max(1, numel * 4 * GRAD_COPIES)))
    parts = []
    for first in range(0, rows, chunk):
        grads, value = step(detached, *[leaf[first : first + chunk] for leaf in leaves])
        named = {n.removeprefix("model."): g for n, g in grads.items()}  # (c, *shape)
        parts.append(_reduce(named, value, reference))
    return _Rows(
        values=torch.cat([p[0] for p in parts]),
        norms=torch.cat([p[1] for p in parts]),
        dots=torch.cat([p[2] for p in parts]),
        total={n: sum((p[3][n] for p in parts[1:]), parts[0][3][n]) for n in reference},
        method=VMAP,
        notes=[f"{chunk} rows per vmap chunk"] if chunk < rows else [],
    )


def _loop_rows(
    model: torch.nn.Module,
    params: dict[str, torch.Tensor],
    batch: Any,
    rows: int,
    losses: Callable[[torch.nn.Module, Any], torch.Tensor],
    spec: LossSpec,
    reference: dict[str, torch.Tensor],
) -> _Rows:
    from torch.func import functional_call

    leaves, rebuild = row_leaves(batch, rows)
    wrapper = wrap_loss(model, losses)
    variables = {n: p.detach().requires_grad_(True) for n, p in params.items()}
    weights = {f"model.{n}": p for n, p in variables.items()}
    parts = []
    for row in range(rows):
        one = rebuild([leaf[row : row + 1] for leaf in leaves])
        with loss_autocast(spec, _device(variables)):
            value = functional_call(wrapper, weights, (one,))[0].float() / spec.num_samples
        parts.append(_row_part(variables, value, reference, retain=False))
    return _stack(parts, PER_ROW)


def _jacobian_rows(
    model: torch.nn.Module,
    params: dict[str, torch.Tensor],
    batch: Any,
    losses: Callable[[torch.nn.Module, Any], torch.Tensor],
    spec: LossSpec,
    reference: dict[str, torch.Tensor],
    rng_state: Any,
) -> _Rows:
    from torch.func import functional_call

    variables = {n: p.detach().requires_grad_(True) for n, p in params.items()}
    weights = {f"model.{n}": p for n, p in variables.items()}
    if rng_state is not None:  # the dropout masks the loop's forward of this micro-batch drew
        set_rng(rng_state)
    with loss_autocast(spec, _device(variables)):
        per_sample = functional_call(wrap_loss(model, losses), weights, (batch,))  # (rows,)
    contributions = per_sample.float() / spec.num_samples
    rows = contributions.numel()
    parts = [
        _row_part(variables, contributions[row], reference, retain=row < rows - 1)
        for row in range(rows)
    ]
    return _stack(parts, BATCH_JACOBIAN)


_Part = tuple["torch.Tensor", "torch.Tensor", "torch.Tensor", dict[str, "torch.Tensor"]]


def _reduce(
    grads: dict[str, torch.Tensor], value: torch.Tensor, reference: dict[str, torch.Tensor]
) -> _Part:
    """(values, ‖g‖², ⟨g, G⟩, Σ g) of a chunk whose gradients are (c, *shape) each."""
    import torch

    values = value.detach().float().reshape(-1)  # (c,)
    norms_sq = torch.zeros_like(values)
    dots = torch.zeros_like(values)
    total = {}
    for name, grad in grads.items():
        flat = grad.float().flatten(1)  # (c, numel)
        norms_sq += (flat * flat).sum(1)
        dots += (flat * reference[name].reshape(1, -1)).sum(1)
        total[name] = flat.sum(0).view(reference[name].shape)
    return values, norms_sq, dots, total


def _row_part(
    variables: dict[str, torch.Tensor],
    value: torch.Tensor,
    reference: dict[str, torch.Tensor],
    retain: bool,
) -> _Part:
    import torch

    names = list(variables)
    grads = torch.autograd.grad(
        value, [variables[n] for n in names], retain_graph=retain, allow_unused=True
    )
    named = {
        n: (g if g is not None else torch.zeros_like(variables[n])).unsqueeze(0)
        for n, g in zip(names, grads, strict=True)
    }  # each (1, *shape)
    return _reduce(named, value, reference)


def _stack(parts: list[_Part], method: str) -> _Rows:
    import torch

    first = parts[0][3]
    return _Rows(
        values=torch.cat([p[0] for p in parts]),
        norms=torch.cat([p[1] for p in parts]),
        dots=torch.cat([p[2] for p in parts]),
        total={n: sum((p[3][n] for p in parts[1:]), first[n]) for n in first},
        method=method,
        notes=[],
    )


def _chunk_budget(device: torch.device) -> int:
    import torch

    if device.type != "cuda":
        return CPU_CHUNK_BYTES
    free, _ = torch.cuda.mem_get_info(device)
    return max(CPU_CHUNK_BYTES, int(free * GPU_FREE_MEMORY_FRACTION))


def _device(variables: dict[str, torch.Tensor]) -> torch.device:
    return next(iter(variables.values())).device


def _rel_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    scale = float(b.abs().max()) if b.numel() else 0.0
    if scale == 0.0 or not math.isfinite(scale):
        return 0.0 if bool((a == b).all()) else math.inf
    return float((a - b).abs().max()) / scale


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0][:160] if text else ""
