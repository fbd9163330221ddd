"""xray entry (buggy): every sequence packed into one row with no document boundaries.

    tscope xray --entry examples/xray_entry_packed_no_boundaries.py --out xray-case

The labels are right (each sequence's first token is -100, so no target crosses a boundary), but
the model sees one long causal row: attention lets every token see the sequences before it.
tscope reports a cross_sequence_leak.
"""

from __future__ import annotations

from typing import Any

import torch


def packed(sequences: list[dict[str, list[int]]]) -> dict[str, torch.Tensor]:
    ids: list[int] = []
    labels: list[int] = []
    positions: list[int] = []
    for s in sequences:
        ids += s["input_ids"]
        labels += [-100, *s["labels"][1:]]  # no target across a boundary
        positions += list(range(len(s["input_ids"])))
    return {
        "input_ids": torch.tensor([ids]),
        "labels": torch.tensor([labels]),
        "position_ids": torch.tensor([positions]),
    }


def train_step(model: Any, sequences: list[dict[str, list[int]]]) -> None:
    batch = packed(sequences)
    model(input_ids=batch["input_ids"], labels=batch["labels"]).loss.backward()
