"""Damaged TensorBoard event files: truncated, corrupt framing, flipped bytes, undecodable records,
random bytes; bad bytes never escape as anything but UnreadableInput, and the reader needs neither
tensorboard nor tensorflow nor the crc32c package.
"""

from __future__ import annotations

import contextlib
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tscope.errors import UnreadableInput
from tscope.ingest.readers import tfrecord
from tscope.ingest.readers.tensorboard import TensorBoardReader
from tscope.model import METRIC_COLUMNS
from tscope.model.metric_names import LOSS

pytest.importorskip("tensorboard")  # the extra that writes the test files
from tensorboard.summary.writer.record_writer import RecordWriter
from tensorboard_events import (
    READER,
    scalar_event,
    series,
    small_file_bytes,  # noqa: F401 (a fixture)
)

CHECKING_READER = TensorBoardReader(verify_checksums=True)


def record_offsets(data: bytes) -> list[tuple[int, int]]:
    """(header offset, total record bytes) of each record, walked independently of tscope."""
    offsets = []
    position = 0
    while position + 12 <= len(data):
        (length,) = struct.unpack_from("<Q", data, position)
        offsets.append((position, length + 16))
        position += length + 16
    return offsets


def write_bytes(directory: Path, data: bytes) -> Path:
    path = directory / "events.out.tfevents.1700000000.host.1.0"
    path.write_bytes(data)
    return path


def test_truncated_last_record_keeps_everything_before_the_cut(
    tmp_path: Path, small_file_bytes: bytes
) -> None:
    full = READER.read(write_bytes(tmp_path, small_file_bytes), "e")
    records = record_offsets(small_file_bytes)
    # Record 0 is the file-version event and record 1 the args text: scalars start at record 2.
    offset, size = records[30]
    for cut in (offset + 3, offset + 12, offset + size // 2, offset + size - 1):
        read = READER.read(write_bytes(tmp_path, small_file_bytes[:cut]), "e")
        assert len(read.metrics) == 28
        assert read.metrics.equals(full.metrics.take(np.arange(28)))
        assert len(read.partial) == 1
        assert "still being written" in read.partial[0].problem
        assert read.config == {"seed": 1}


def test_corrupt_framing_in_the_middle_stops_there(tmp_path: Path, small_file_bytes: bytes) -> None:
    offset, _ = record_offsets(small_file_bytes)[20]
    damaged = bytearray(small_file_bytes)
    damaged[offset] ^= 0x40  # the length now points into the middle of a later record
    read = READER.read(write_bytes(tmp_path, bytes(damaged)), "e")
    assert len(read.metrics) == 18
    assert len(read.partial) == 1
    assert f"corrupt at byte {offset}" in read.partial[0].problem


def test_checksum_check_catches_a_flipped_value_byte(
    tmp_path: Path, small_file_bytes: bytes
) -> None:
    offset, size = record_offsets(small_file_bytes)[10]
    # The record is `... 15 <float32>` then the 4-byte data checksum: flip the float's last byte.
    damaged = bytearray(small_file_bytes)
    damaged[offset + size - 5] ^= 0x01
    path = write_bytes(tmp_path, bytes(damaged))

    unchecked = READER.read(path, "e")
    assert len(unchecked.metrics) == 80 and unchecked.partial == []
    checked = CHECKING_READER.read(path, "e")
    assert len(checked.metrics) == 79
    assert len(checked.partial) == 1
    assert "1 records failed their data checksum" in checked.partial[0].problem
    assert CHECKING_READER.read(write_bytes(tmp_path, small_file_bytes), "e").partial == []


def test_undecodable_record_with_intact_framing_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "events.out.tfevents.1"
    event = scalar_event(1, ("loss", 1.0)).SerializeToString()
    with path.open("wb") as handle:
        records = RecordWriter(handle)
        records.write(event)
        records.write(b"\xff\xff\xff\xff")  # framed and checksummed, but not an Event
        records.write(scalar_event(2, ("loss", 2.0)).SerializeToString())
    read = CHECKING_READER.read(path, "e")
    assert series(read, LOSS) == ([1, 2], pytest.approx([1.0, 2.0]))
    assert len(read.partial) == 1 and "not valid Event protos" in read.partial[0].problem


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (b"", "empty"),
        (b"hello, this is not an event file at all" * 10, "not a TensorBoard event file"),
        (bytes(range(256)) * 4, "not a TensorBoard event file"),
    ],
)
def test_unusable_files_raise_unreadable_input(
    tmp_path: Path, content: bytes, problem: str
) -> None:
    with pytest.raises(UnreadableInput, match=problem):
        READER.read(write_bytes(tmp_path, content), "e")


def test_first_record_cut_off_is_unreadable(tmp_path: Path, small_file_bytes: bytes) -> None:
    with pytest.raises(UnreadableInput, match="cut off before the end of its first record"):
        READER.read(write_bytes(tmp_path, small_file_bytes[:30]), "e")


def test_missing_file_is_unreadable(tmp_path: Path) -> None:
    with pytest.raises(UnreadableInput, match="cannot open"):
        READER.read(tmp_path / "events.out.tfevents.gone", "gone")


def test_crc32c_implementations_agree_with_the_standard() -> None:
    assert tfrecord._crc32c_pure_python(b"123456789") == 0xE3069283  # RFC 3720 check value
    assert tfrecord.crc32c(b"123456789") == 0xE3069283
    rng = np.random.default_rng(0)
    for size in (0, 1, 7, 8, 100):
        data = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        assert tfrecord._crc32c_pure_python(data) == tfrecord.crc32c(data)
    lengths = np.asarray([0, 1, 35, 2**40 + 3], dtype=np.uint64)
    vectorized = tfrecord._masked_crc32c_of_lengths(lengths).tolist()
    assert vectorized == [tfrecord.masked_crc32c(struct.pack("<Q", int(n))) for n in lengths]


def mutations() -> st.SearchStrategy[tuple[str, int, int]]:
    return st.tuples(
        st.sampled_from(["truncate", "flip", "overwrite", "insert", "delete"]),
        st.integers(min_value=0, max_value=10_000),
        st.integers(min_value=0, max_value=255),
    )


def mutate(data: bytes, edits: list[tuple[str, int, int]]) -> bytes:
    damaged = bytearray(data)
    for kind, position, byte in edits:
        if not damaged:
            break
        index = position % len(damaged)
        if kind == "truncate":
            del damaged[index:]
        elif kind == "flip":
            damaged[index] ^= 1 << (byte % 8)
        elif kind == "overwrite":
            damaged[index] = byte
        elif kind == "insert":
            damaged.insert(index, byte)
        else:
            del damaged[index]
    return bytes(damaged)


@pytest.fixture(scope="module")
def scratch_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@settings(max_examples=150, deadline=None)
@given(edits=st.lists(mutations(), min_size=1, max_size=4), verify=st.booleans())
def test_damaged_bytes_never_raise_anything_but_unreadable_input(
    scratch_dir: Path, small_file_bytes: bytes, edits: list[tuple[str, int, int]], verify: bool
) -> None:
    path = write_bytes(scratch_dir, mutate(small_file_bytes, edits))
    try:
        read = TensorBoardReader(verify_checksums=verify).read(path, "e")
    except UnreadableInput:
        return
    assert list(read.metrics.columns) == list(METRIC_COLUMNS)
    assert read.metrics["order"].tolist() == list(range(len(read.metrics)))


@settings(max_examples=100, deadline=None)
@given(data=st.binary(max_size=600))
def test_random_bytes_never_raise_anything_but_unreadable_input(
    scratch_dir: Path, data: bytes
) -> None:
    path = write_bytes(scratch_dir, data)
    with contextlib.suppress(UnreadableInput):
        READER.read(path, "e")


def iter_records(data: bytes) -> Iterator[bytes]:
    for offset, size in record_offsets(data):
        yield data[offset : offset + size]


@settings(max_examples=60, deadline=None)
@given(garbage=st.binary(min_size=1, max_size=64), where=st.integers(min_value=1, max_value=80))
def test_garbage_payload_with_valid_framing_is_contained(
    scratch_dir: Path, small_file_bytes: bytes, garbage: bytes, where: int
) -> None:
    """A checksummed record holding random bytes costs at most that record."""
    framed = struct.pack("<Q", len(garbage))
    framed += struct.pack("<I", tfrecord.masked_crc32c(framed))
    framed += garbage + struct.pack("<I", tfrecord.masked_crc32c(garbage))
    records = list(iter_records(small_file_bytes))
    index = min(where, len(records))
    path = write_bytes(scratch_dir, b"".join([*records[:index], framed, *records[index:]]))
    read = CHECKING_READER.read(path, "e")
    # The garbage may itself decode as an event with scalars; it never costs the others.
    assert len(read.metrics) >= 80
    assert all("not valid Event protos" in partial.problem for partial in read.partial)


def test_reads_without_tensorboard_tensorflow_or_the_crc32c_package(
    tmp_path: Path, small_file_bytes: bytes
) -> None:
    """The core install: tensorboard is an extra, crc32c too (the pure-Python CRC steps in)."""
    path = write_bytes(tmp_path, small_file_bytes)
    script = (
        "import sys\n"
        "for name in ('tensorboard', 'tensorflow', 'crc32c'):\n"
        "    sys.modules[name] = None  # any import of them now fails\n"
        "from pathlib import Path\n"
        "from tscope.ingest.readers import tfrecord\n"
        "from tscope.ingest.readers.tensorboard import TensorBoardReader\n"
        "assert tfrecord.crc32c is tfrecord._crc32c_pure_python\n"
        f"read = TensorBoardReader(verify_checksums=True).read(Path({str(path)!r}), 'e')\n"
        "assert len(read.metrics) == 80 and read.partial == [], read.partial\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False
    )
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize(
    "lengths",
    [
        [],
        [30, 31, 30, 72, 65535],
        [65536, 5, 2**63 + 5],  # long (or corrupt) lengths: the np.unique way
    ],
)
def test_expected_length_checksums_by_table_and_by_sort_agree(lengths: list[int]) -> None:
    as_array = np.asarray(lengths, dtype=np.uint64)
    one_by_one = [tfrecord.masked_crc32c(struct.pack("<Q", length)) for length in lengths]
    assert tfrecord._expected_length_checksums(as_array).tolist() == one_by_one
