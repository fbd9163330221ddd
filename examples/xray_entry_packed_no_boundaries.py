"""xray entry (buggy): every sequence packed into one row with no document boundaries.

    tscope xray --entry examples/xray_entry_packed_no_boundaries.py --out xray-case

The labels are right (each sequence's first token is -100, so no target crosses a boundary), but
the model sees one long causal row: attention lets every token see the sequences before it.
tscope reports a cross_sequence_leak.
"""

from __future__ import annotations

from typing import Any

from transformers import DataCollatorWithFlattening

# transformers' packing collator: sequences end to end in one row, each one's first label -100
# (no target across a boundary), and here no position_ids: nothing marks where a sequence starts
pack = DataCollatorWithFlattening(return_tensors="pt", return_position_ids=False)


def train_step(model: Any, sequences: list[dict[str, list[int]]]) -> None:
    batch = pack(sequences)
    model(input_ids=batch["input_ids"], labels=batch["labels"]).loss.backward()
