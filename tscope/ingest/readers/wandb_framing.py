"""The framing of W&B's `.wandb` run log, and protobuf wire decoding without protobuf classes.

The log is leveldb-log style (wandb/sdk/internal/datastore.py before 0.31, DOMAIN.md §4): a 7-byte
file header `:W&B`, u16 0xBEE1, u8 version; then 32 KiB blocks of records, each with a 7-byte
header `<IHB>` = (CRC-32 of the data seeded with the CRC-32 of the type byte, data length, type).
A payload longer than the rest of its block is split FIRST, MIDDLE..., LAST; fewer than 7 bytes
left in a block are zero padding. Each payload is one protobuf `wandb_internal.Record`.
"""

from __future__ import annotations

import struct
import zlib

FILE_HEADER = struct.Struct("<4sHB")  # magic, magic number, version
FILE_MAGIC = b":W&B"
FILE_MAGIC_NUMBER = 0xBEE1
SUPPORTED_VERSION = 0
BLOCK_SIZE = 32 * 1024
RECORD_HEADER = struct.Struct("<IHB")  # crc32, data length, record type
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
WIRE_VARINT, WIRE_FIXED64, WIRE_BYTES, WIRE_FIXED32 = 0, 1, 2, 5


def split_records(data: bytes) -> tuple[list[bytes], list[str]]:
    """The record payloads after the file header, and what was wrong with the framing."""
    payloads: list[bytes] = []
    problems: list[str] = []
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
            payloads.append(chunk)
            pending = None
        elif kind == FIRST:
            pending = bytearray(chunk)
        elif pending is not None:
            pending += chunk
            if kind == LAST:
                payloads.append(bytes(pending))
                pending = None
    if pending is not None:
        problems.append(_cut_message(len(data)))
    if corrupt:
        problems.insert(0, f"{corrupt} damaged record(s) skipped (checksum or header mismatch)")
    return payloads, problems


def _cut_message(position: int) -> str:
    return (
        f"the file ends inside a record at byte {position}: the run was still being written or "
        "was killed; everything before the cut was read"
    )


class MalformedProtobuf(Exception):
    """A payload that is not valid protobuf wire format."""


def _varint(buffer: bytes, position: int) -> tuple[int, int]:
    result = 0
    for shift in range(0, 70, 7):
        if position >= len(buffer):
            raise MalformedProtobuf
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
    raise MalformedProtobuf


def proto_fields(buffer: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value): ints for varints, bytes for everything else.

    A list, with one-byte varints (nearly every tag and length here) decoded inline: a long run
    has millions of fields and a call per varint doubles the reading time.
    """
    fields: list[tuple[int, int, int | bytes]] = []
    position, end = 0, len(buffer)
    while position < end:
        tag = buffer[position]
        if tag < 0x80:
            position += 1
        elif position + 1 < end and buffer[position + 1] < 0x80:
            # Two-byte tags: field numbers 16-2047 (`value_json` = 16 is in every item).
            tag = (tag & 0x7F) | (buffer[position + 1] << 7)
            position += 2
        else:
            tag, position = _varint(buffer, position)
        wire = tag & 7
        value: int | bytes
        if wire == WIRE_BYTES:
            if position >= end:
                raise MalformedProtobuf
            length = buffer[position]
            if length < 0x80:
                position += 1
            else:
                length, position = _varint(buffer, position)
            value = buffer[position : position + length]
            position += length
        elif wire == WIRE_VARINT:
            if position < end and buffer[position] < 0x80:
                value = buffer[position]
                position += 1
            else:
                value, position = _varint(buffer, position)
        elif wire in (WIRE_FIXED64, WIRE_FIXED32):
            size = 8 if wire == WIRE_FIXED64 else 4
            value = buffer[position : position + size]
            position += size
        else:
            raise MalformedProtobuf  # groups (3, 4) and unknown wire types: not in these messages
        if position > end or tag < 8:
            raise MalformedProtobuf  # cut short, or field number 0
        fields.append((tag >> 3, wire, value))
    return fields


def proto_text(value: int | bytes) -> str:
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else ""


def signed_varint(value: int) -> int:
    """A negative int32/int64 is sent as a 64-bit two's complement varint."""
    return value - (1 << 64) if value >= 1 << 63 else value
