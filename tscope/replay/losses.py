"""One micro-batch's training loss and per-sample losses, three ways.

- "model": a transformers model computes its own loss from `labels`, exactly as Trainer calls it
  (`model(**batch, num_items_in_batch=N)`); the bit-exact path for Trainer runs. Per-sample losses
  come from the same forward's logits.
- "entry_loss_fn": the entry file's loss_fn gives per-sample losses; the micro-batch's loss is
  their sum over the step's sample count S, so the step loss is their mean.
- "default_causal_lm": any other model: next-token cross-entropy of its logits against `labels`.

Per-sample losses are scaled so that their mean over all S samples of the step is the step loss:
loss_i = S · Σ_t CE_i,t / D, with D the step's normaliser (N, or the micro-batch's token count
times the accumulation steps when the loss is a per-micro-batch mean).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tscope.errors import UsageError
from tscope.replay.entry import Entry

if TYPE_CHECKING:
    import torch

MODEL_LOSS = "model"
ENTRY_LOSS = "entry_loss_fn"
DEFAULT_CAUSAL_LM = "default_causal_lm"
IGNORE_INDEX = -100  # the label value every Hugging Face loss skips


def micro_batch_loss(
    path: str,
    model: torch.nn.Module,
    batch: Any,
    entry: Entry,
    num_items: torch.Tensor | None,
    num_samples: int,
    micro_batches: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(loss to backpropagate, detached per-sample losses of shape (rows,))."""
    if path == ENTRY_LOSS:
        per_sample = entry.per_sample_loss(model, batch, num_items, num_samples)
        return per_sample.sum() / num_samples, per_sample.detach()
    inputs = _mapping(batch, entry)
    labels = inputs["labels"]
    if path == MODEL_LOSS:
        extra = {"num_items_in_batch": num_items} if num_items is not None else {}
        output = model(**inputs, **extra)
        loss = output.loss
        if num_items is None:  # a per-micro-batch mean: Trainer divides by the accumulation steps
            loss = loss / micro_batches
        logits = output.logits.detach()
    else:
        output = model(**{k: v for k, v in inputs.items() if k != "labels"})
        logits = _logits(output, entry)
    token_losses = causal_lm_token_losses(logits, labels)  # (rows, T)
    if path == MODEL_LOSS:
        denominator = num_items if num_items is not None else _valid(labels) * micro_batches
        per_sample = token_losses.sum(dim=1) * num_samples / denominator
        return loss, per_sample.detach()
    assert num_items is not None  # the default path always counts its tokens
    per_sample = token_losses.sum(dim=1) * num_samples / num_items
    return per_sample.sum() / num_samples, per_sample.detach()


def causal_lm_token_losses(logits: torch.Tensor, labels: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of position t against label t+1, as ForCausalLMLoss computes it (float32,
    labels padded with -100 and shifted); 0 where the label is ignored. Shape (rows, T)."""
    import torch.nn.functional as F

    shifted = F.pad(labels, (0, 1), value=IGNORE_INDEX)[..., 1:]  # (rows, T)
    vocab = logits.shape[-1]
    losses = F.cross_entropy(
        logits.float().reshape(-1, vocab),
        shifted.reshape(-1),
        ignore_index=IGNORE_INDEX,
        reduction="none",
    )  # (rows * T,)
    return losses.view(shifted.shape)


def _valid(labels: torch.Tensor) -> torch.Tensor:
    return labels[..., 1:].ne(IGNORE_INDEX).sum()


def _mapping(batch: Any, entry: Entry) -> Mapping[str, Any]:
    if not isinstance(batch, Mapping) or "labels" not in batch:
        raise UsageError(
            f"{entry.path}: batches() yields {type(batch).__name__} items; without a loss_fn the "
            "replay needs dict batches holding `labels` (and the model's inputs). Define "
            "loss_fn(model, batch) in the entry file for other batches."
        )
    return batch


def _logits(output: Any, entry: Entry) -> torch.Tensor:
    logits = getattr(output, "logits", None)
    if logits is None and isinstance(output, (tuple, list)) and output:
        logits = output[0]
    if logits is None and hasattr(output, "dim"):
        logits = output
    if logits is None or not hasattr(logits, "dim") or logits.dim() != 3:
        raise UsageError(
            f"{entry.path}: the model's output has no (batch, time, vocab) logits to compute a "
            "causal-LM loss from. Define loss_fn(model, batch) in the entry file."
        )
    result: torch.Tensor = logits
    return result
