"""The loop's per-sample loss as a function of the weights, for any subset of a batch's rows.

losses.micro_batch_loss computes per-sample losses detached, for the whole micro-batch; here the
same definition stays differentiable and runs on one row or on all of them, with the weights
swapped in by torch.func.functional_call. loss_i = S · Σ_t CE_i,t / D with D fixed by the step
(the Trainer's N, or the micro-batch's predicted tokens times the accumulation steps), whatever
rows a call sees; an entry loss_fn gets N and S when it declares them.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tscope.replay.entry import Entry
from tscope.replay.losses import ENTRY_LOSS, IGNORE_INDEX, causal_lm_token_losses

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class LossSpec:
    """How the loop computed this step's per-sample losses (losses.micro_batch_loss)."""

    path: str  # losses.MODEL_LOSS, ENTRY_LOSS or DEFAULT_CAUSAL_LM
    entry: Entry
    num_items: torch.Tensor | None  # the step's normaliser N
    num_samples: int  # S, rows over all micro-batches
    micro_batches: int
    autocast_dtype: torch.dtype | None = None
    grad_scale: float | None = None  # a GradScaler's scale still in .grad at on_backward


def sample_losses(spec: LossSpec, batch: Any) -> Callable[[torch.nn.Module, Any], torch.Tensor]:
    """The loop's per-sample losses of a batch (losses.py), differentiable: (rows,)."""
    if spec.path == ENTRY_LOSS:

        def from_entry(model: torch.nn.Module, rows: Any) -> torch.Tensor:
            return spec.entry.per_sample_loss(model, rows, spec.num_items, spec.num_samples)

        return from_entry
    # Fixed by the whole micro-batch, not by the rows a call sees: N, or (no N) the micro-batch's
    # predicted tokens times the accumulation steps, as losses.micro_batch_loss divides.
    denominator: Any = spec.num_items
    if denominator is None:
        labels = batch["labels"]
        denominator = labels[..., 1:].ne(IGNORE_INDEX).sum() * spec.micro_batches

    def causal_lm(model: torch.nn.Module, rows: Any) -> torch.Tensor:
        output = model(**{k: v for k, v in rows.items() if k != "labels"})
        token_losses = causal_lm_token_losses(_logits(output), rows["labels"])  # (rows, T)
        per_sample: torch.Tensor = token_losses.sum(dim=1) * spec.num_samples / denominator
        return per_sample

    return causal_lm


def _logits(output: Any) -> torch.Tensor:
    logits = getattr(output, "logits", None)
    if logits is None and isinstance(output, (tuple, list)):
        logits = output[0]
    result: torch.Tensor = output if logits is None else logits
    return result


def wrap_loss(
    model: torch.nn.Module, losses: Callable[[torch.nn.Module, Any], torch.Tensor]
) -> torch.nn.Module:
    """A module whose forward is the per-sample loss, so functional_call can swap the weights
    that a loss_fn's own model(...) call uses; the model is its child `model`."""
    import torch

    class SampleLoss(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.model = model

        def forward(self, batch: Any) -> torch.Tensor:
            return losses(self.model, batch)

    return SampleLoss()


def row_leaves(batch: Any, rows: int) -> tuple[list[Any], Callable[[list[Any]], Any]]:
    """The batch's per-row tensors (leading size `rows`), and how to rebuild a batch from them."""
    leaves: list[Any] = []

    def skeleton(value: Any) -> Any:
        if hasattr(value, "dim") and value.dim() >= 1 and value.shape[0] == rows:
            leaves.append(value)
            return _Slot(len(leaves) - 1)
        if isinstance(value, Mapping):
            return {key: skeleton(item) for key, item in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(skeleton(item) for item in value)
        return value

    shape = skeleton(batch)

    def rebuild(values: list[Any]) -> Any:
        def fill(node: Any) -> Any:
            if isinstance(node, _Slot):
                return values[node.position]
            if isinstance(node, dict):
                return {key: fill(item) for key, item in node.items()}
            if isinstance(node, (list, tuple)):
                return type(node)(fill(item) for item in node)
            return node

        return fill(shape)

    return leaves, rebuild


@dataclass(frozen=True)
class _Slot:
    position: int


def loss_autocast(spec: LossSpec, device: torch.device | None) -> Any:
    import torch

    if spec.autocast_dtype is None or device is None:
        return nullcontext()
    return torch.autocast(device.type, dtype=spec.autocast_dtype)
