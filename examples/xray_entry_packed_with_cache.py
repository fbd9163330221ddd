"""xray entry (buggy): packing with position_ids reset, but the model creates a cache.

    tscope xray --entry examples/xray_entry_packed_with_cache.py --out xray-case

The same batch as xray_entry_packed_position_ids.py without use_cache=False: the config's
use_cache=True makes the model build a DynamicCache, transformers then skips the packed-sequence
detection, and attention crosses the boundaries. tscope reports a cross_sequence_leak.
"""

from __future__ import annotations

from typing import Any

from transformers import DataCollatorWithFlattening

# transformers' packing collator: sequences end to end in one row, each one's first label -100
# (no target across a boundary), position_ids restarting at 0 for each sequence
pack = DataCollatorWithFlattening(return_tensors="pt")


def train_step(model: Any, sequences: list[dict[str, list[int]]]) -> None:
    model(**pack(sequences)).loss.backward()
