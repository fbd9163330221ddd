"""xray entry (buggy): gradient accumulation as the mean of micro-batch means.

    tscope xray --entry examples/xray_entry_micro_batch_mean.py --out xray-case

Each micro-batch's mean loss (`model(...).loss`) is divided by the number of micro-batches: a
token in a micro-batch with few targets weighs more than one in a long micro-batch. tscope
reports a token_weighting_mismatch whose weights match the micro_batch_mean rule.
"""

from __future__ import annotations

from typing import Any

import torch
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


def train_step(model: Any, sequences: list[dict[str, list[int]]]) -> None:
    micro_batches = [pad(part) for part in split(sequences, MICRO_BATCHES)]
    for batch in micro_batches:
        loss = model(**batch).loss  # the mean over this micro-batch's targets
        (loss / len(micro_batches)).backward()
