"""The strided decoder of record runs (scalar_runs) against the per-record fast path it speeds up
(event_proto.decode_scalar_records): the same records, steps, values and tag offsets, on files
torch's SummaryWriter writes, on a file mixing layouts, and on damaged runs."""

from __future__ import annotations

import struct
from pathlib import Path

import numpy as np
import pytest

from tscope.ingest.readers.event_proto import ScalarRecords, decode_scalar_records
from tscope.ingest.readers.scalar_runs import decode_scalar_runs
from tscope.ingest.readers.tensorboard import TensorBoardReader
from tscope.ingest.readers.tfrecord import masked_crc32c, split_records

pytest.importorskip("torch.utils.tensorboard")
from tensorboard_events import the_event_file, write_with_summary_writer

# Enough steps for runs longer than scalar_runs' shortest, across the step varint's 1- to 2-byte
# boundary (128), so a run ends and another begins.
STEPS = 700


def hf_like(writer: object, steps: int = STEPS, new_style: bool = False) -> None:
    for step in range(steps):
        writer.add_scalar("train/loss", 2.0 + np.sin(step / 7), step, new_style=new_style)
        writer.add_scalar("train/grad_norm", 1.0 + step % 5, step, new_style=new_style)
        writer.add_scalar("train/learning_rate", 1e-3, step, new_style=new_style)
        writer.add_scalar("train/epoch", step / 100, step, new_style=new_style)


def mixed(writer: object) -> None:
    writer.add_text("args", '{"seed": 1}')
    hf_like(writer, 300)
    for step in range(300, 700):  # a second layout: new_style, another tag, eval every 50 steps
        writer.add_scalar("train/loss", 1.0 / (step + 1), step, new_style=True)
        writer.add_scalar("lr", 1e-4, step)
        if step % 50 == 0:
            writer.add_scalar("eval/loss", 3.0, step)
            writer.add_text("note", f"step {step}")
    writer.add_scalar("train/loss", float("nan"), 700)


def assert_same_records(buffer: bytes) -> ScalarRecords:
    records = split_records(buffer)
    general = decode_scalar_records(buffer, records.starts, records.lengths)
    runs = decode_scalar_runs(buffer, records.starts, records.lengths)
    for name in ("record_index", "step", "tag_start", "tag_end", "value_start"):
        assert np.array_equal(getattr(runs, name), getattr(general, name)), name
    assert runs.value.dtype == general.value.dtype == np.float64
    assert np.array_equal(runs.value.view(np.int64), general.value.view(np.int64))  # NaNs too
    # A record's tag_like holds the same tag bytes and comes no later.
    assert np.all(runs.tag_like <= np.arange(runs.tag_like.size))
    for index, like in enumerate(runs.tag_like.tolist()):
        assert (
            buffer[runs.tag_start[index] : runs.tag_end[index]]
            == buffer[runs.tag_start[like] : runs.tag_end[like]]
        )
    return runs


@pytest.mark.parametrize("new_style", [False, True])
def test_summary_writer_runs_decode_as_each_record(tmp_path: Path, new_style: bool) -> None:
    path = write_with_summary_writer(tmp_path, lambda writer: hf_like(writer, new_style=new_style))
    runs = assert_same_records(path.read_bytes())
    assert runs.record_index.size == 4 * STEPS
    # From step 128 on (2-byte step varints) each tag's records form one run.
    later = runs.step >= 128
    assert np.count_nonzero((runs.tag_like == np.arange(runs.tag_like.size))[later]) == 4


def test_mixed_layouts_and_a_truncated_last_record(tmp_path: Path) -> None:
    buffer = write_with_summary_writer(tmp_path, mixed).read_bytes()
    assert_same_records(buffer)
    assert_same_records(buffer[:-7])  # the last record cut off


def test_damaged_rows_inside_a_run_fall_back(tmp_path: Path) -> None:
    buffer = bytearray(write_with_summary_writer(tmp_path, hf_like).read_bytes())
    records = split_records(bytes(buffer))
    middle = records.starts.size // 2
    tag_byte = int(records.starts[middle]) + 20  # inside the summary header or the tag
    buffer[tag_byte] ^= 0x01
    varint = int(records.starts[middle + 9]) + 10  # the step varint's first byte
    buffer[varint] ^= 0x80  # its continuation bit: a longer varint than its run's
    value_suffix = int(records.starts[middle + 30]) - 1  # the previous record's checksum
    buffer[value_suffix] ^= 0xFF
    assert_same_records(bytes(buffer))


def test_reader_gives_the_same_table_with_and_without_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write_with_summary_writer(tmp_path, mixed)
    with_runs = TensorBoardReader(verify_checksums=True).read(path, path.name)
    monkeypatch.setattr(
        "tscope.ingest.readers.tensorboard.decode_scalar_runs", decode_scalar_records
    )
    without = TensorBoardReader(verify_checksums=True).read(path, path.name)
    assert with_runs.metrics.equals(without.metrics)
    assert with_runs.metrics.original_name.labels == without.metrics.original_name.labels
    assert with_runs.config == without.config


def test_tags_of_one_length_are_told_apart(tmp_path: Path) -> None:
    """Every record has the same length, so the byte distance repeats after one record; the tags
    only repeat after three."""

    def log(writer: object) -> None:
        for step in range(1000, 1400):
            for tag in ("loss_a", "loss_b", "loss_c"):
                writer.add_scalar(tag, step / 3, step)

    runs = assert_same_records(write_with_summary_writer(tmp_path, log).read_bytes())
    assert np.count_nonzero(runs.tag_like == np.arange(runs.tag_like.size)) == 3


def _framed(payload: bytes) -> bytes:
    length = struct.pack("<Q", len(payload))
    return (
        length
        + struct.pack("<I", masked_crc32c(length))
        + payload
        + struct.pack("<I", masked_crc32c(payload))
    )


@pytest.mark.parametrize(
    "last",
    [b"", b"\x09" + bytes(8), b"\x09" + bytes(8) + b"\x10\x05"],
    ids=["empty", "wall", "step"],
)
def test_a_shorter_last_record_at_the_runs_stride_is_not_read_past_the_file(
    tmp_path: Path, last: bytes
) -> None:
    """The last record of a file sits at its run's byte stride but is shorter than the run's
    records: a row as long as the run's first ran past the end of the buffer (ValueError)."""

    def log(writer: object) -> None:
        for step in range(1000, 1600):
            writer.add_scalar("train/loss", step / 3, step)

    buffer = write_with_summary_writer(tmp_path, log).read_bytes() + _framed(last)
    runs = assert_same_records(buffer)
    assert runs.record_index.size == 600
    assert TensorBoardReader().read(the_event_file(tmp_path), "events").metrics.step.size == 600
