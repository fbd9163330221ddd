"""TFRecord framing of event files: `<Q len><I masked crc(len)><data><I masked crc(data)>`.

Walking the framing is the one sequential part of reading an event file (each length says where
the next record starts). `_walk_headers` keeps it cheap by confirming whole blocks of predicted
headers with numpy; the length checksums of all records are then verified at once, which catches
corrupt framing without a per-record Python call. Data checksums are optional: they cost a pass
over every byte.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

# 8-byte little-endian payload length followed by the masked CRC-32C of those 8 bytes.
HEADER_BYTES = 12
# Masked CRC-32C of the payload.
FOOTER_BYTES = 4
# TensorFlow's CRC mask: rotate right by 15 bits, then add this constant (DOMAIN.md §3).
_CRC_MASK_DELTA = 0xA282EAD8
# CRC-32C (Castagnoli), reflected polynomial.
_CRC32C_POLYNOMIAL = 0x82F63B78
_UINT32 = 0xFFFFFFFF

_FRAMING_BYTES = HEADER_BYTES + FOOTER_BYTES
# Walking the headers: records hopped one by one before guessing that their cycle repeats, the
# longest cycle looked for (tags logged per step), and the block sizes the guesses are made in.
_HOPS_BETWEEN_GUESSES = 64
_LONGEST_CYCLE_RECORDS = 32
_FIRST_GUESS_RECORDS = 256
_LARGEST_GUESS_RECORDS = 1 << 16

_read_length = struct.Struct("<Q").unpack_from


def _crc32c_table() -> list[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ _CRC32C_POLYNOMIAL if crc & 1 else crc >> 1
        table.append(crc)
    return table


_TABLE = _crc32c_table()
_TABLE_ARRAY = np.asarray(_TABLE, dtype=np.uint32)


def _crc32c_pure_python(data: bytes) -> int:
    """Fallback when the `crc32c` C package is missing: correct, about 100x slower."""
    crc = _UINT32
    table = _TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ _UINT32


def _load_crc32c() -> Callable[[bytes], int]:
    try:
        from crc32c import crc32c as crc32c_c  # optional extra `tscope-ml[fast]`
    except ImportError:
        return _crc32c_pure_python
    return crc32c_c


crc32c: Callable[[bytes], int] = _load_crc32c()


def masked_crc32c(data: bytes) -> int:
    crc = crc32c(data)
    return (((crc >> 15) | (crc << 17)) + _CRC_MASK_DELTA) & _UINT32


def byte_offset_view(buffer: bytes, dtype: str) -> np.ndarray:
    """A read-only view where element i is the little-endian `dtype` value starting at byte i.

    Gathering from it (`view[offsets]`) reads unaligned fields of many records in one numpy call.
    """
    width = np.dtype(dtype).itemsize
    count = max(len(buffer) - width + 1, 0)
    if count == 0:
        return np.empty(0, dtype=dtype)
    return np.ndarray(shape=(count,), dtype=dtype, buffer=buffer, offset=0, strides=(1,))


def _masked_crc32c_of_lengths(lengths: np.ndarray) -> np.ndarray:
    """Masked CRC-32C of each 8-byte little-endian length, for all records at once."""
    crc = np.full(lengths.shape, _UINT32, dtype=np.uint32)
    for byte_index in range(8):
        byte = ((lengths >> np.uint64(8 * byte_index)) & np.uint64(0xFF)).astype(np.uint32)
        crc = _TABLE_ARRAY[(crc ^ byte) & np.uint32(0xFF)] ^ (crc >> np.uint32(8))
    crc ^= np.uint32(_UINT32)
    rotated = (crc >> np.uint32(15)) | (crc << np.uint32(17))
    return rotated + np.uint32(_CRC_MASK_DELTA)  # uint32 arithmetic wraps, as the mask wants


@dataclass(frozen=True)
class Records:
    """Where each intact record's payload lies in the file, and why reading stopped, if early."""

    starts: np.ndarray  # (n_records,) int64, byte offset of each payload
    lengths: np.ndarray  # (n_records,) int64, payload bytes
    # Set when the framing ended before the end of the file.
    stop_problem: str | None
    # True when the stop is a cut-off last record (a live run), False for corrupt framing.
    truncated_tail: bool
    # Indices (into starts) of records whose data checksum did not match; empty unless verified.
    bad_checksums: np.ndarray


def split_records(buffer: bytes, verify_data_checksums: bool = False) -> Records:
    """Frame the records of an event file; never raises on bad bytes, reports them instead."""
    size = len(buffer)
    header_offsets, position = _walk_headers(buffer)
    if header_offsets.size:
        lengths = byte_offset_view(buffer, "<u8")[header_offsets]
        stored = byte_offset_view(buffer, "<u4")[header_offsets + 8]
    else:
        lengths = np.empty(0, dtype=np.uint64)
        stored = np.empty(0, dtype=np.uint32)
    mismatched = np.flatnonzero(_expected_length_checksums(lengths) != stored)

    stop_problem: str | None = None
    truncated_tail = False
    kept = header_offsets.size
    if mismatched.size:
        kept = int(mismatched[0])
        offset = int(header_offsets[kept])
        stop_problem = (
            f"record framing is corrupt at byte {offset} (the length checksum does not match); "
            f"{kept} records before it were read, the last {size - offset} bytes were not"
        )
    elif position > size:
        # The last header is intact but its data runs past the end of the file.
        kept -= 1
        offset = int(header_offsets[kept])
        truncated_tail = True
        stop_problem = (
            f"the last record is cut off at byte {size} (it needs "
            f"{position - offset} bytes, {size - offset} are there): the file was probably "
            "still being written; every complete record before it was read"
        )
    elif position < size:
        truncated_tail = True
        stop_problem = (
            f"the file ends inside a record header ({size - position} stray bytes at the end): "
            "the file was probably still being written; every complete record before it was read"
        )

    starts = header_offsets[:kept] + HEADER_BYTES
    payload_lengths = lengths[:kept].astype(np.int64)
    bad = (
        _bad_data_checksums(buffer, starts, payload_lengths)
        if verify_data_checksums
        else np.empty(0, dtype=np.int64)
    )
    return Records(
        starts=starts,
        lengths=payload_lengths,
        stop_problem=stop_problem,
        truncated_tail=truncated_tail,
        bad_checksums=bad,
    )


# Record lengths below this are checksummed through a table indexed by length (no sort).
_LENGTH_TABLE_SIZE = 1 << 16


def _expected_length_checksums(lengths: np.ndarray) -> np.ndarray:
    """The masked CRC-32C each record's length header should carry. A log has few distinct
    record lengths: each is checksummed once, then looked up by length (a table when they are
    all short, else through np.unique's sort)."""
    lengths = np.asarray(lengths, dtype=np.uint64)
    if lengths.size and int(lengths.max()) < _LENGTH_TABLE_SIZE:
        distinct = np.flatnonzero(np.bincount(lengths.astype(np.intp)))
        table = np.zeros(int(distinct[-1]) + 1, dtype=np.uint32)
        table[distinct] = _masked_crc32c_of_lengths(distinct.astype(np.uint64))
        expected: np.ndarray = table[lengths.astype(np.intp)]
        return expected
    distinct_lengths, length_codes = np.unique(lengths, return_inverse=True)
    checksums = _masked_crc32c_of_lengths(np.asarray(distinct_lengths, dtype=np.uint64))
    by_record: np.ndarray = checksums[length_codes.reshape(-1)]
    return by_record


def _walk_headers(buffer: bytes) -> tuple[np.ndarray, int]:
    """Offsets of the record headers, following each length, and the offset after the last record.

    A training log repeats one cycle of records (the same tags, the same lengths) thousands of
    times, so after a few hops the walk guesses that the cycle goes on, places a block of headers
    at once, and keeps those whose stored lengths confirm the guess. Where the guess fails it hops
    again, so any file is walked exactly as a plain hop-by-hop loop would walk it.
    """
    size = len(buffer)
    last_header = size - HEADER_BYTES
    lengths_at = byte_offset_view(buffer, "<u8")
    blocks: list[np.ndarray] = []
    position = 0
    while position <= last_header:
        offsets, lengths, position = _hop(buffer, position, last_header)
        blocks.append(np.asarray(offsets, dtype=np.int64))
        cycle = _repeating_cycle(lengths)
        guess = _FIRST_GUESS_RECORDS
        while cycle is not None and position <= last_header:
            # np.resize would concatenate guess / cycle.size copies one by one.
            predicted_lengths = np.tile(cycle, -(-guess // cycle.size))[:guess]
            predicted_offsets = position + np.concatenate(
                ([0], np.cumsum(predicted_lengths[:-1] + _FRAMING_BYTES))
            )
            inside = int(np.searchsorted(predicted_offsets, last_header, side="right"))
            predicted_offsets, predicted_lengths = (
                predicted_offsets[:inside],
                predicted_lengths[:inside],
            )
            stored = lengths_at[predicted_offsets]
            wrong = np.flatnonzero(stored != predicted_lengths.astype(np.uint64))
            confirmed = int(wrong[0]) if wrong.size else inside
            if confirmed:
                blocks.append(predicted_offsets[:confirmed])
                position = int(predicted_offsets[confirmed - 1]) + int(
                    predicted_lengths[confirmed - 1] + _FRAMING_BYTES
                )
            if confirmed < inside or inside < guess:
                break  # the cycle changed (or the file ends): hop to learn the new one
            cycle = np.roll(cycle, -guess % cycle.size)
            guess = min(guess * 2, _LARGEST_GUESS_RECORDS)
    all_offsets = np.concatenate(blocks) if blocks else np.empty(0, dtype=np.int64)
    return all_offsets, position


def _hop(buffer: bytes, position: int, last_header: int) -> tuple[list[int], list[int], int]:
    """Follow up to _HOPS_BETWEEN_GUESSES lengths one by one: (offsets, lengths, next offset)."""
    offsets: list[int] = []
    lengths: list[int] = []
    for _ in range(_HOPS_BETWEEN_GUESSES):
        if position > last_header:
            break
        length = _read_length(buffer, position)[0]
        offsets.append(position)
        lengths.append(length)
        position += length + _FRAMING_BYTES
    return offsets, lengths, position


def _repeating_cycle(lengths: list[int]) -> np.ndarray | None:
    """The shortest run of lengths that the latest hops repeated twice, or None."""
    for period in range(1, min(_LONGEST_CYCLE_RECORDS, len(lengths) // 2) + 1):
        if lengths[-period:] == lengths[-2 * period : -period]:
            return np.asarray(lengths[-period:], dtype=np.int64)
    return None


def _bad_data_checksums(buffer: bytes, starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    if starts.size == 0:
        return np.empty(0, dtype=np.int64)
    ends = starts + lengths
    stored = byte_offset_view(buffer, "<u4")[ends].tolist()
    bad = [
        index
        for index, (start, end, expected) in enumerate(
            zip(starts.tolist(), ends.tolist(), stored, strict=True)
        )
        if masked_crc32c(buffer[start:end]) != expected
    ]
    return np.asarray(bad, dtype=np.int64)
