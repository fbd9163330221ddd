"""xray entry: packing with position_ids restarting per sequence and use_cache=False.

    tscope xray --entry examples/xray_entry_packed_position_ids.py --out xray-case

transformers (5.x, sdpa and eager) turns position_ids that restart at 0 into a block-diagonal
mask — but only when no attention_mask is passed and no cache is created. use_cache defaults to
the config's True, which creates a DynamicCache and silently turns the detection off
(examples/xray_entry_packed_with_cache.py); with use_cache=False tscope finds no leak.
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
    model(**batch, use_cache=False).loss.backward()
