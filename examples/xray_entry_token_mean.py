"""xray entry: a correct token-mean step over two micro-batches (padded, right side).

    tscope xray --entry examples/xray_entry_token_mean.py --out xray-case

Every micro-batch's summed token cross-entropy is divided by the target count of the whole step,
so each target token weighs the same however the batch is split: tscope reports no finding.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.utils.rnn import pad_sequence

MICRO_BATCHES = 2  # gradient accumulation steps
PAD_ID = 0
intended = "token_mean"


def pad(sequences: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
    """Right-padded (rows, longest) tensors; padding is masked and labelled -100."""
    ids = [torch.tensor(s["input_ids"]) for s in sequences]
    return {
        "input_ids": pad_sequence(ids, batch_first=True, padding_value=PAD_ID),
        "labels": pad_sequence(
            [torch.tensor(s["labels"]) for s in sequences], batch_first=True, padding_value=-100
        ),
        "attention_mask": pad_sequence([torch.ones_like(i) for i in ids], batch_first=True),
    }


def split(sequences: list[Any], parts: int) -> list[list[Any]]:
    size = -(-len(sequences) // parts)
    return [sequences[i : i + size] for i in range(0, len(sequences), size)]


def summed_token_loss(model: Any, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    logits = model(input_ids=batch["input_ids"], attention_mask=batch["attention_mask"]).logits
    targets = batch["labels"][:, 1:]  # (rows, longest-1): position t predicts token t+1
    return F.cross_entropy(
        logits[:, :-1].flatten(0, 1).float(), targets.flatten(), ignore_index=-100, reduction="sum"
    )


def train_step(model: Any, sequences: list[dict[str, list[int]]]) -> None:
    micro_batches = [pad(part) for part in split(sequences, MICRO_BATCHES)]
    tokens_in_step = sum(int(b["labels"][:, 1:].ne(-100).sum()) for b in micro_batches)
    for batch in micro_batches:
        (summed_token_loss(model, batch) / tokens_in_step).backward()
