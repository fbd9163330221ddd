"""Each row's gradient norm and share of the step's gradient in a sharded replay, exactly.

Single-process attribution (sample_grads.py) takes per-sample gradients of a full parameter copy,
which a sharded model never holds. Here every row of every rank gets one backward through the
FSDP2 model itself, in lockstep: for row j of rank r, rank r backpropagates that row's share of
its training loss (world_size · Σ_t CE_j,t / N) and every other rank the same expression times
zero, so FSDP2's averaging reduce-scatter leaves each shard exactly the row's gradient g_rj of
the global loss. Each rank then adds its shards' ⟨g, G⟩ and ‖g‖² (G the step's accumulated
gradient, stashed before and put back after); one all_reduce per step then gives every row's
share and norm.
Memory stays sharded; the cost is one forward and backward per row of the global batch.

Nothing of the replay changes: the step's gradients are restored object for object, the global
RNG states are put back, and no weight or optimizer state is touched. Σ_i g_i is checked
against G (sum_rel_diff), as single-process attribution does.
"""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING, Any, cast

from tscope.replay.entry import Entry
from tscope.replay.losses import micro_batch_loss

if TYPE_CHECKING:
    import torch

    from tscope.replay.sharded_loop import ShardedSettings

SHARDED_PER_ROW = "sharded_per_row"


def row_attribution(
    model: torch.nn.Module,
    micro: list[Any],
    entry: Entry,
    settings: ShardedSettings,
    n_items: torch.Tensor | None,
    per_rank_samples: float,
    rank_rows: list[int],
) -> dict[str, Any]:
    """{norms, shares, sum_rel_diff, seconds} for every row of the step, in rank order (the
    same on every rank); norms are ‖g_i‖ of loss_i / S, as sample_grads reports them."""
    import torch
    import torch.distributed as dist

    started = time.perf_counter()
    parameters = [p for p in model.parameters() if p.requires_grad and p.grad is not None]
    stashed = [p.grad for p in parameters]
    step_grads = [_local(g).detach().float().clone() for g in stashed]
    total = torch.stack([(g * g).sum() for g in step_grads]).sum().to(torch.float64).reshape(1)
    dist.all_reduce(total)
    rows = _row_batches(micro)
    rng = torch.get_rng_state()
    summed = [torch.zeros_like(g) for g in step_grads]
    pairs: list[torch.Tensor] = []  # per row: this rank's shards' (⟨g, G⟩, ‖g‖²)
    try:
        for p in parameters:
            p.grad = None
        for owner, owner_rows in enumerate(rank_rows):
            for j in range(owner_rows):
                mine = settings.rank == owner
                # A rank without rows still joins FSDP2's collectives, with an empty batch.
                batch = rows[j] if mine else rows[0] if rows else _first_rows(micro[0], 0)
                loss, _ = micro_batch_loss(
                    settings.loss_path,
                    model,
                    batch,
                    entry,
                    n_items,
                    cast(int, per_rank_samples),  # fractional S / world: only divided by
                    1,
                )
                (loss if mine else loss * 0.0).backward()  # type: ignore[no-untyped-call]
                local = [
                    _local(p.grad).detach().float() if p.grad is not None else torch.zeros_like(g)
                    for p, g in zip(parameters, step_grads, strict=True)
                ]
                pairs.append(
                    torch.stack(
                        [
                            torch.stack(
                                [(a * b).sum() for a, b in zip(local, step_grads, strict=True)]
                            ).sum(),
                            torch.stack([(a * a).sum() for a in local]).sum(),
                        ]
                    ).to(torch.float64)
                )  # (2,)
                for acc, part in zip(summed, local, strict=True):
                    acc.add_(part)
                for p in parameters:
                    p.grad = None
    finally:
        for p, grad in zip(parameters, stashed, strict=True):
            p.grad = grad
        torch.set_rng_state(rng)
    miss = torch.stack([((a - g) ** 2).sum() for a, g in zip(summed, step_grads, strict=True)])
    # One all_reduce for every row's pair and the Σ g_i check (rows × 2 + 1 values).
    reduced = torch.cat([torch.stack(pairs).reshape(-1), miss.sum().to(torch.float64).reshape(1)])
    dist.all_reduce(reduced)
    values = reduced.tolist()
    dots, squares, missed = values[0:-1:2], values[1:-1:2], values[-1]
    norms = [math.sqrt(max(v, 0.0)) for v in squares]
    norm_sq = float(total[0])
    return {
        "norms": norms,
        "shares": [d / norm_sq for d in dots] if norm_sq > 0 else [],
        "sum_rel_diff": math.sqrt(missed / norm_sq) if norm_sq > 0 else None,
        "method": SHARDED_PER_ROW,
        "seconds": time.perf_counter() - started,
    }


def _row_batches(micro: list[Any]) -> list[Any]:
    """Every row of the step's micro-batches as a one-row batch, in training order."""
    return [
        _first_rows(batch, 1, start) for batch in micro for start in range(_leading_size(batch))
    ]


def _first_rows(batch: Any, count: int, start: int = 0) -> Any:
    """Rows start..start+count of a batch (dict, tuple/list or tensor) of tensors."""
    from collections.abc import Mapping

    def part(value: Any) -> Any:
        is_rows = hasattr(value, "dim") and value.dim() >= 1
        return value[start : start + count] if is_rows else value

    if isinstance(batch, Mapping):
        return {key: part(value) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(part(value) for value in batch)
    return part(batch)


def _leading_size(batch: Any) -> int:
    from collections.abc import Mapping

    values = list(batch.values()) if isinstance(batch, Mapping) else batch
    if not isinstance(values, (list, tuple)):
        values = [values]
    return next(int(v.shape[0]) for v in values if hasattr(v, "dim") and v.dim() >= 1)


def _local(tensor: Any) -> Any:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor
