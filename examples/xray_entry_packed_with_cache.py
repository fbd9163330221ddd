"""xray entry (buggy): packing with position_ids reset, but the model creates a cache.

    tscope xray --entry examples/xray_entry_packed_with_cache.py --out xray-case

The same batch as xray_entry_packed_position_ids.py without use_cache=False: the config's
use_cache=True makes the model build a DynamicCache, transformers then skips the packed-sequence
detection, and attention crosses the boundaries. tscope reports a cross_sequence_leak.
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
    model(**packed(sequences)).loss.backward()
