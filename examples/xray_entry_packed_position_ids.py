"""xray entry: packing with position_ids restarting per sequence and use_cache=False.

    tscope xray --entry examples/xray_entry_packed_position_ids.py --out xray-case

transformers (5.x, sdpa and eager) turns position_ids that restart at 0 into a block-diagonal
mask — but only when no attention_mask is passed and no cache is created. use_cache defaults to
the config's True, which creates a DynamicCache and silently turns the detection off
(examples/xray_entry_packed_with_cache.py); with use_cache=False tscope finds no leak.
"""

from __future__ import annotations

from typing import Any

from transformers import DataCollatorWithFlattening

# transformers' packing collator: sequences end to end in one row, each one's first label -100
# (no target across a boundary), position_ids restarting at 0 for each sequence
pack = DataCollatorWithFlattening(return_tensors="pt")


def train_step(model: Any, sequences: list[dict[str, list[int]]]) -> None:
    model(**pack(sequences), use_cache=False).loss.backward()
