"""The framing of W&B's `.wandb` run log (its records are decoded by protobuf_wire.py).

The log is leveldb-log style (wandb/sdk/internal/datastore.py before 0.31, DOMAIN.md §4): a 7-byte
file header `:W&B`, u16 0xBEE1, u8 version; then 32 KiB blocks of records, each with a 7-byte
header `<IHB>` = (CRC-32 of the data seeded with the CRC-32 of the type byte, data length, type).
A payload longer than the rest of its block is split FIRST, MIDDLE..., LAST; fewer than 7 bytes
left in a block are zero padding. Each payload is one protobuf `wandb_internal.Record`.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator

FILE_HEADER = struct.Struct("<4sHB")  # magic, magic number, version
FILE_MAGIC = b":W&B"
FILE_MAGIC_NUMBER = 0xBEE1
SUPPORTED_VERSION = 0
BLOCK_SIZE = 32 * 1024
RECORD_HEADER = struct.Struct("<IHB")  # crc32, data length, record type
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4


def split_records(data: bytes) -> tuple[list[bytes], list[str]]:
    """The record payloads after the file header, and what was wrong with the framing."""
    problems: list[str] = []
    payloads = list(iter_payloads(data, problems))
    return payloads, problems


def iter_payloads(data: bytes, problems: list[str]) -> Iterator[bytes]:
    """The record payloads after the file header, one at a time; what was wrong with the framing
    is appended to `problems` once the last payload is out.

    The reader decodes each payload as it comes: a list of them all held a bytes object per
    record, ~60 bytes of memory for a 25-byte record (2.5 times a log of tiny records).
    """
    corrupt = 0
    pending: bytearray | None = None
    position = FILE_HEADER.size
    while position < len(data):
        block_left = BLOCK_SIZE - position % BLOCK_SIZE
        if block_left < RECORD_HEADER.size:
            position += block_left  # block trailer padding
            continue
        if position + RECORD_HEADER.size > len(data):
            problems.append(_cut_message(position))
            pending = None
            break
        checksum, length, kind = RECORD_HEADER.unpack_from(data, position)
        if checksum == 0 and length == 0 and kind == 0:
            position += block_left  # zero fill at the end of a block
            continue
        start = position + RECORD_HEADER.size
        end = start + length
        if kind not in (FULL, FIRST, MIDDLE, LAST) or length > block_left - RECORD_HEADER.size:
            corrupt += 1
            pending = None
            position += block_left  # resynchronize at the next block, as leveldb does
            continue
        if end > len(data):
            problems.append(_cut_message(position))
            pending = None
            break
        chunk = data[start:end]
        if zlib.crc32(chunk, zlib.crc32(bytes([kind]))) != checksum:
            corrupt += 1
            pending = None
            position += block_left
            continue
        position = end
        if kind == FULL:
            yield chunk
            pending = None
        elif kind == FIRST:
            pending = bytearray(chunk)
        elif pending is not None:
            pending += chunk
            if kind == LAST:
                yield bytes(pending)
                pending = None
    if pending is not None:
        problems.append(_cut_message(len(data)))
    if corrupt:
        problems.insert(0, f"{corrupt} damaged record(s) skipped (checksum or header mismatch)")


def _cut_message(position: int) -> str:
    return (
        f"the file ends inside a record at byte {position}: the run was still being written or "
        "was killed; everything before the cut was read"
    )
