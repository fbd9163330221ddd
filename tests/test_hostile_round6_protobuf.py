"""Red team round 6 (session 29): protobuf messages made of very many tiny fields.

An event record of empty `Summary.Value`s (2 bytes each) became one Python object per value,
~150x the file (10 MB -> 1.5 GB); a W&B record of 2-byte varint fields one tuple per field, ~38x
the file (60 MB -> 2.4 GB). The readers now walk past the fields they do not read without an
object for each, refuse a message with more fields than any producer writes, and keep the file's
good points, listing the crafted record in `partial`. The inputs are scaled down: the field
limits are lowered where a test needs to cross them.
"""

from __future__ import annotations

import struct
import tracemalloc
from collections.abc import Callable
from pathlib import Path

import pytest
from test_reader_wandb import config_record, field, frame, history_record

from tscope.ingest.readers import event_proto, wandb_records
from tscope.ingest.readers.tensorboard import TensorBoardReader
from tscope.ingest.readers.tfrecord import masked_crc32c
from tscope.ingest.readers.wandb_offline import WandbOfflineReader
from tscope.model import LogRead

# A reader may hold the file and a few copies of it; the crafted inputs cost 30-150x before.
_MEMORY_PER_FILE_BYTE = 8


def _tfrecord(data: bytes) -> bytes:
    header = struct.pack("<Q", len(data))
    return (
        header
        + struct.pack("<I", masked_crc32c(header))
        + data
        + struct.pack("<I", masked_crc32c(data))
    )


def _scalar_event(step: int, value: float) -> bytes:
    tag = b"train/loss"
    summary_value = field(1, tag) + bytes([2 << 3 | 5]) + struct.pack("<f", value)
    wall_time = bytes([1 << 3 | 1]) + struct.pack("<d", 1.7e9 + step)
    return wall_time + field(2, step) + field(5, field(1, summary_value))


def _empty_values_event(count: int) -> bytes:
    """Event{step=1, summary={value{} x count}}: 2 bytes of file per value."""
    return field(2, 1) + field(5, b"\x0a\x00" * count)


def _event_file(tmp_path: Path, crafted: bytes) -> Path:
    path = tmp_path / "events.out.tfevents.1.host"
    good = b"".join(_tfrecord(_scalar_event(step, 3.0 - step / 100)) for step in range(50))
    path.write_bytes(good + _tfrecord(crafted))
    return path


def _peak_bytes(read: Callable[[], LogRead]) -> tuple[LogRead, int]:
    tracemalloc.start()
    try:
        result = read()
        return result, tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_empty_summary_values_become_no_objects(tmp_path: Path) -> None:
    """The red team's event record: its 50,000 empty values were 50,000 SummaryValues; they
    carry nothing to read, so the decoder now skips them while walking the summary."""
    crafted = _empty_values_event(50_000)
    assert event_proto.decode_event(crafted, 0, len(crafted)).values == []
    path = _event_file(tmp_path, crafted)
    read, peak = _peak_bytes(lambda: TensorBoardReader().read(path, path.name))
    assert read.metrics["step"].tolist() == list(range(50))
    assert peak < _MEMORY_PER_FILE_BYTE * path.stat().st_size, (peak, path.stat().st_size)


def test_an_event_of_too_many_summary_values_is_skipped_and_the_points_kept(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(event_proto, "MAX_SUMMARY_VALUES", 1000, raising=False)
    path = _event_file(tmp_path, _empty_values_event(5000))
    read = TensorBoardReader().read(path, path.name)
    assert read.metrics["step"].tolist() == list(range(50))
    assert [note.path for note in read.partial] == [path.name]
    assert "a Summary of more than 1,000 fields" in read.partial[0].problem, read.partial[0].problem


def test_a_tensor_of_many_floats_is_not_listed_float_by_float() -> None:
    """Only a one-number tensor is a scalar: a packed float_val of 100,000 elements was a list of
    100,000 Python floats (8x its bytes); the decoder keeps at most two, enough to tell."""
    tensor = field(1, event_proto.DT_FLOAT) + field(5, struct.pack("<100000f", *range(100_000)))
    summary_value = field(1, b"weights") + field(8, tensor)
    event = field(2, 3) + field(5, field(1, summary_value))
    (value,) = event_proto.decode_event(event, 0, len(event)).values
    assert value.tensor is not None
    assert len(value.tensor.float_val) <= 2 and value.tensor.scalar() is None
    one = field(1, event_proto.DT_FLOAT) + field(5, struct.pack("<f", 0.5))
    event = field(5, field(1, field(1, b"lr") + field(8, one)))
    (value,) = event_proto.decode_event(event, 0, len(event)).values
    assert value.tensor is not None and value.tensor.scalar() == 0.5


# ---------------------------------------------------------------------------------------------
# W&B


def _loss_rows(count: int) -> list[bytes]:
    return [history_record(step, {"loss": str(3.0 - step / 100)}) for step in range(count)]


def _wandb_read(tmp_path: Path, payloads: list[bytes]) -> tuple[Path, LogRead, int]:
    path = tmp_path / "run-x.wandb"
    path.write_bytes(frame(payloads))
    read, peak = _peak_bytes(lambda: WandbOfflineReader().read(path, path.name))
    return path, read, peak


def _problems(read: LogRead) -> list[str]:
    return [note.problem for note in read.partial]


def test_a_record_of_many_varint_fields_is_skipped_and_the_rows_kept(tmp_path: Path) -> None:
    """The red team's record (field 15 = 0, 2 bytes a field, over many 32 KiB blocks) was listed
    field by field, ~72 bytes a field; no wandb Record holds more than a handful of fields."""
    crafted = b"\x78\x00" * 50_000
    path, read, peak = _wandb_read(tmp_path, [*_loss_rows(30), crafted])
    assert read.metrics["step"].tolist() == list(range(30))
    notes = _problems(read)
    assert any("1 record(s)" in note and "more than" in note for note in notes), notes
    assert peak < _MEMORY_PER_FILE_BYTE * path.stat().st_size, (peak, path.stat().st_size)


def test_a_config_record_of_too_many_updates_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Config and summary records were not bounded at all; their fields are counted like a
    history row's."""
    monkeypatch.setattr(wandb_records, "MAX_ITEMS_PER_RECORD", 1000, raising=False)
    crafted = field(5, b"\x0a\x00" * 5000)  # ConfigRecord{update{} x 5000}
    _, read, _ = _wandb_read(tmp_path, [config_record({"lr": "0.1"}), crafted, *_loss_rows(10)])
    assert read.metrics["step"].tolist() == list(range(10))
    assert read.config.get("lr") == 0.1
    notes = _problems(read)
    assert any("not valid protobuf" in note for note in notes), notes


def test_a_history_row_of_too_many_fields_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wandb_records, "MAX_ITEMS_PER_RECORD", 1000, raising=False)
    crafted = field(2, b"\x0a\x00" * 5000)  # HistoryRecord{item{} x 5000}
    _, read, _ = _wandb_read(tmp_path, [*_loss_rows(10), crafted])
    assert read.metrics["step"].tolist() == list(range(10))
    notes = _problems(read)
    assert any("more than 1,0" in note for note in notes), notes


@pytest.mark.parametrize("record_field", [3, 5, 17])  # summary, config, run
def test_an_oversized_record_of_any_decoded_kind_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, record_field: int
) -> None:
    """Only history records had a size cap; summary, config and run records are decoded too."""
    monkeypatch.setattr(wandb_records, "MAX_RECORD_BYTES", 1000, raising=False)
    item = field(1, field(1, b"big") + field(16, b'"' + b"x" * 2000 + b'"'))
    _, read, _ = _wandb_read(tmp_path, [*_loss_rows(10), field(record_field, item)])
    assert read.metrics["step"].tolist() == list(range(10))
    assert "big" not in read.config and "big" not in read.config.get("wandb_summary", {})
    notes = _problems(read)
    assert any("over" in note and "1,000 bytes" in note for note in notes), notes
