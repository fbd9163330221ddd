"""The sharded replay's training loop: one optimizer step at a time on every rank, in lockstep.

Each rank takes its own batch of the step (entry `batches(start_step, rank, world_size)`), and the
global quantities are all-reduced as a data-parallel loop computes them:

- the loss normaliser N (label tokens of every rank; default causal-LM loss) or the step's sample
  count S (entry loss_fn), so each rank backpropagates world_size · Σ_own / N and FSDP2's
  averaging reduce-scatter leaves every shard the gradient of the global mean;
- the step loss (Σ over ranks / world_size), the gradient norm (DTensor norm of the sharded
  gradients), per-parameter gradient and weight norms (one all_reduce of squared norms);
- at the watched steps, every row's gradient norm and share ⟨g_i, G⟩ / ‖G‖² (sharded_attribution).

Per-sample losses are gathered in rank order (rank 0's rows, then rank 1's, ...).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from tscope.errors import UsageError
from tscope.replay.entry import Entry
from tscope.replay.losses import DEFAULT_CAUSAL_LM, micro_batch_loss
from tscope.replay.normaliser import num_items

if TYPE_CHECKING:
    import torch


@dataclass
class ShardedSettings:
    device: torch.device
    loss_path: str  # losses.DEFAULT_CAUSAL_LM or losses.ENTRY_LOSS
    max_grad_norm: float | None
    group_lrs: dict[int, tuple[float, ...]]  # step -> every group's learning rate
    watched: frozenset[int]  # steps whose rows are attributed
    rank: int
    world_size: int


def rank_batches(entry: Entry, start_step: int, rank: int, world_size: int) -> Iterator[Any]:
    """The entry's batches for this rank; batches(start_step) alone is refused (every rank would
    train on the same rows, which no data-parallel run does)."""
    import inspect

    try:
        parameters = inspect.signature(entry.batches).parameters
    except (TypeError, ValueError):
        parameters = {}  # type: ignore[assignment]
    if len(parameters) < 3 and not any(
        p.kind == inspect.Parameter.VAR_POSITIONAL for p in parameters.values()
    ):
        raise UsageError(
            f"{entry.path}: a sharded replay calls batches(start_step, rank, world_size); "
            "define those parameters so each rank gets the rows it trained on."
        )
    try:
        return iter(entry.batches(start_step, rank, world_size))  # type: ignore[call-arg]
    except TypeError as error:
        raise UsageError(
            f"{entry.path}: batches({start_step}, {rank}, {world_size}) returned no iterable."
        ) from error


def sharded_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    entry: Entry,
    step: int,
    item: Any,
    settings: ShardedSettings,
) -> dict[str, Any]:
    """Replay one step on this rank; returns the step's record (global values on every rank)."""
    import torch
    import torch.distributed as dist

    from tscope.replay.loop import _float32_sum, _rows, _to_device
    from tscope.replay.sharded_attribution import row_attribution

    started = time.perf_counter()
    world = settings.world_size
    micro = [_to_device(b, settings.device) for b in (item if isinstance(item, list) else [item])]
    if not micro:
        raise UsageError(f"{entry.path}: batches() yielded an empty list for step {step}.")
    rows = [_rows(b, entry) for b in micro]
    counts = torch.tensor(
        [
            float(sum(rows)),
            float(num_items(micro, shifted=True))
            if settings.loss_path == DEFAULT_CAUSAL_LM
            else 0.0,
        ],
        dtype=torch.float64,
    )
    rank_rows = [torch.zeros(1, dtype=torch.int64) for _ in range(world)]
    dist.all_gather(rank_rows, torch.tensor([sum(rows)]))
    dist.all_reduce(counts)  # S and N over every rank
    samples, tokens = int(counts[0]), counts[1]
    # What each rank divides by so that FSDP2's mean over ranks gives the global mean's gradient.
    n_items = (
        (tokens / world).to(torch.float32) if settings.loss_path == DEFAULT_CAUSAL_LM else None
    )
    per_rank_samples = samples / world
    lrs = settings.group_lrs[step]
    for group, lr in zip(optimizer.param_groups, lrs, strict=False):
        group["lr"] = lr
    micro_losses, per_sample = [], []
    for batch in micro:
        loss, sample_losses = micro_batch_loss(
            settings.loss_path,
            model,
            batch,
            entry,
            n_items,
            cast(int, per_rank_samples),  # fractional S / world: micro_batch_loss only divides
            len(micro),
        )
        loss.backward()  # type: ignore[no-untyped-call]
        micro_losses.append(loss.detach().float())
        per_sample.append(sample_losses.float().reshape(-1))  # loss_i = S · Σ_t CE_i,t / N
    attribution = None
    if step in settings.watched:
        attribution = row_attribution(
            model,
            micro,
            entry,
            settings,
            n_items,
            per_rank_samples,
            [int(r.item()) for r in rank_rows],
        )
    grad_norm = _clip(model, settings.max_grad_norm)
    layers = _parameter_norms(model)
    optimizer.step()
    model.zero_grad(set_to_none=True)
    local_losses = torch.stack(micro_losses)  # (micro,)
    dist.all_reduce(local_losses)
    values = (local_losses / world).tolist()
    gathered: list[Any] = [None] * world
    dist.all_gather_object(gathered, torch.cat(per_sample).tolist())
    return {
        "step": step,
        "loss": _float32_sum(values),
        "grad_norm": grad_norm,
        "learning_rate": lrs[0],
        "micro_losses": values,
        "per_sample_loss": [v for rank_values in gathered for v in rank_values],
        "rank_rows": [int(r.item()) for r in rank_rows],
        "samples": samples,
        "num_items": float(tokens) if settings.loss_path == DEFAULT_CAUSAL_LM else None,
        "layers": layers,
        "attribution": attribution,
        "seconds": time.perf_counter() - started,
    }


def _clip(model: torch.nn.Module, max_norm: float | None) -> float | None:
    import torch

    parameters = [p for p in model.parameters() if p.grad is not None]
    if not parameters:
        return None
    if max_norm is not None and max_norm > 0:
        norm = torch.nn.utils.clip_grad_norm_(parameters, max_norm)
    else:
        norm = torch.nn.utils.get_total_norm([p.grad for p in parameters if p.grad is not None])
    full = norm.full_tensor() if hasattr(norm, "full_tensor") else norm
    return float(full)


def _parameter_norms(model: torch.nn.Module) -> dict[str, dict[str, float]]:
    """‖grad‖ (after clipping, as the optimizer sees it) and ‖W‖ of every parameter, from the
    shards: one all_reduce of their squares."""
    import torch
    import torch.distributed as dist

    from tscope.model.replay_statistics import GRAD_NORM, WEIGHT_NORM

    named = [(n, p) for n, p in model.named_parameters() if p.grad is not None]
    if not named:
        return {}
    squares = torch.stack(
        [
            value
            for _, p in named
            for value in (_local(p.grad).float().pow(2).sum(), _local(p).float().pow(2).sum())
        ]
    ).to(torch.float64)  # (2 * parameters,)
    dist.all_reduce(squares)
    norms = squares.sqrt().view(-1, 2).tolist()
    return {
        name: {GRAD_NORM: grad, WEIGHT_NORM: weight}
        for (name, _), (grad, weight) in zip(named, norms, strict=True)
    }


def _local(tensor: Any) -> Any:
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor


def run_sharded_steps(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    entry: Entry,
    first: int,
    last: int,
    settings: ShardedSettings,
) -> tuple[list[dict[str, Any]], list[str]]:
    import torch.distributed as dist

    records: list[dict[str, Any]] = []
    items = rank_batches(entry, first - 1, settings.rank, settings.world_size)
    for step in range(first, last + 1):
        item = next(items, None)
        ended = [None] * settings.world_size
        dist.all_gather_object(ended, item is None)
        if any(ended):  # every rank stops together, or the collectives would hang
            return records, [f"steps {step}-{last}: batches() ended after step {step - 1}"]
        records.append(sharded_step(model, optimizer, entry, step, item, settings))
    return records, []
