"""A W&B offline log of very many history items: the points cap applies while reading.

A 100 MB log of small integer items (7 bytes each) took over 3 GB: every item became tuples, in
the run log and again as a table row. Now reading stops at MAX_HISTORY_POINTS items with a
partial note (0.9 GB, 13 s for that file), and a single oversized history record is skipped.
The caps are lowered here so that the crafted logs stay small.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from test_reader_wandb import field, frame, history_record, integer_item_record

from tscope.ingest.readers import wandb_records
from tscope.ingest.readers.wandb_offline import WandbOfflineReader


def _items_row(step: int, count: int) -> bytes:
    item = field(1, field(2, b"loss") + field(16, b"1.5"))
    return field(2, item * count + field(2, field(1, step)))


def test_history_items_past_the_cap_are_not_read(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(wandb_records, "MAX_HISTORY_POINTS", 25)
    path = tmp_path / "run-x.wandb"
    path.write_bytes(frame([integer_item_record(step, "loss", 2) for step in range(40)]))
    read = WandbOfflineReader().read(path, "run-x.wandb")
    assert read.metrics["step"].tolist() == list(range(25))
    notes = [note.problem for note in read.partial]
    assert any("only the first 25 history items were read" in note for note in notes), notes


def test_one_row_of_many_items_stops_at_the_cap(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(wandb_records, "MAX_HISTORY_POINTS", 100)
    path = tmp_path / "run-x.wandb"
    path.write_bytes(frame([_items_row(0, 60), _items_row(1, 60), _items_row(2, 60)]))
    read = WandbOfflineReader().read(path, "run-x.wandb")
    assert len(read.metrics) == 100
    assert read.metrics["step"].tolist() == [0] * 60 + [1] * 40


def test_an_oversized_history_record_is_skipped(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(wandb_records, "MAX_HISTORY_RECORD_BYTES", 1000)
    path = tmp_path / "run-x.wandb"
    rows = [history_record(step, {"loss": "1.5"}) for step in range(5)]
    path.write_bytes(frame([*rows, _items_row(5, 200)]))
    read = WandbOfflineReader().read(path, "run-x.wandb")
    assert read.metrics["step"].tolist() == list(range(5))
    notes = [note.problem for note in read.partial]
    assert any("1 history record(s) over 1,000 bytes skipped" in note for note in notes), notes


def _nested_item_row(step: int, parts: int) -> bytes:
    """A history item whose key is `parts` nested_key parts (field 2 of the item)."""
    keys = b"".join(field(2, b"%02d" % (i % 100)) for i in range(parts))
    return field(2, field(1, keys + field(16, b"1.0")) + field(2, field(1, step)))


def test_a_history_key_of_very_many_parts_is_not_read(tmp_path: Path) -> None:
    """Every part of a key became a string and the whole path was cached: a 78 MB log of such
    keys took 3.1 GB (red team, session 27). A key deeper than MAX_KEY_PATH_PARTS, or an item
    larger than MAX_HISTORY_ITEM_BYTES, is not read; the run's own series still is."""
    path = tmp_path / "run-x.wandb"
    rows = [history_record(step, {"loss": str(3.0 - step / 100)}) for step in range(20)]
    deep = wandb_records.MAX_KEY_PATH_PARTS + 1
    huge = wandb_records.MAX_HISTORY_ITEM_BYTES  # 4 bytes a part: past the item bound
    path.write_bytes(frame([*rows, _nested_item_row(20, deep), _nested_item_row(21, huge)]))
    read = WandbOfflineReader().read(path, "run-x.wandb")
    assert set(read.metrics["original_name"]) == {"loss"}
    assert read.metrics["step"].tolist() == list(range(20))
