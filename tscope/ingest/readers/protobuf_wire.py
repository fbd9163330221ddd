"""The protobuf wire format, read without generated classes: one decoder for every reader.

TensorBoard `Event`s (event_proto.py) and W&B `Record`s (wandb_records.py) are both protobuf
messages read from a stranger's file, so both go through these two loops and fail the same way:
a `WireFormatError` that says what was wrong, never an IndexError or a hang.

- `field_spans(buffer, start, end)`: (number, wire type, value, value end) with byte offsets, for
  nested messages decoded in place (no copy of a sub-message).
- `field_values(buffer)`: (number, wire type, value) with the bytes of each length-delimited or
  fixed field cut out, one-byte tags and lengths decoded inline (a W&B run has millions of fields
  and a call per varint doubled its reading time).
"""

from __future__ import annotations

# Wire types (https://protobuf.dev/programming-guides/encoding/); groups (3, 4) are not used by
# any message tscope reads and are refused.
VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5
_MAX_VARINT_SHIFT = 63  # ten 7-bit groups: the longest varint (a 64-bit value)


class WireFormatError(ValueError):
    """The bytes are not a well-formed protobuf message; the message says what was wrong."""


def varint(buffer: bytes, position: int, end: int) -> tuple[int, int]:
    """The varint at `position` (ending before `end`) and the position after it."""
    result = 0
    shift = 0
    while True:
        if position >= end:
            raise WireFormatError(f"varint cut short at byte {position}")
        if shift > _MAX_VARINT_SHIFT:
            raise WireFormatError(f"varint longer than 10 bytes at byte {position}")
        byte = buffer[position]
        position += 1
        result |= (byte & 0x7F) << shift
        if byte < 0x80:
            return result, position
        shift += 7


def field_spans(buffer: bytes, start: int, end: int) -> list[tuple[int, int, int, int]]:
    """(field number, wire type, value, value end) of each field in buffer[start:end].

    `value` is the decoded integer for varints, else the byte offset where the value starts.
    """
    fields = []
    position = start
    while position < end:
        key, position = varint(buffer, position, end)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireFormatError(f"field number 0 at byte {position}")
        if wire_type == VARINT:
            value, position = varint(buffer, position, end)
            fields.append((number, wire_type, value, position))
            continue
        if wire_type == FIXED64:
            value_end = position + 8
        elif wire_type == FIXED32:
            value_end = position + 4
        elif wire_type == LENGTH_DELIMITED:
            length, position = varint(buffer, position, end)
            value_end = position + length
        else:
            raise WireFormatError(f"unsupported wire type {wire_type} in field {number}")
        if value_end > end:
            raise WireFormatError(f"field {number} runs past the end of its message")
        fields.append((number, wire_type, position, value_end))
        position = value_end
    return fields


def field_values(buffer: bytes) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field of a whole message: ints for varints,
    the field's bytes for everything else."""
    fields: list[tuple[int, int, int | bytes]] = []
    position, end = 0, len(buffer)
    while position < end:
        tag = buffer[position]
        if tag < 0x80:
            position += 1
        elif position + 1 < end and buffer[position + 1] < 0x80:
            # Two-byte tags: field numbers 16-2047 (W&B's `value_json` = 16 is in every item).
            tag = (tag & 0x7F) | (buffer[position + 1] << 7)
            position += 2
        else:
            tag, position = varint(buffer, position, end)
        wire = tag & 7
        value: int | bytes
        if wire == LENGTH_DELIMITED:
            if position >= end:
                raise WireFormatError(f"field {tag >> 3} has no length: the message is cut short")
            length = buffer[position]
            if length < 0x80:
                position += 1
            else:
                length, position = varint(buffer, position, end)
            value = buffer[position : position + length]
            position += length
        elif wire == VARINT:
            if position < end and buffer[position] < 0x80:
                value = buffer[position]
                position += 1
            else:
                value, position = varint(buffer, position, end)
        elif wire in (FIXED64, FIXED32):
            size = 8 if wire == FIXED64 else 4
            value = buffer[position : position + size]
            position += size
        else:
            raise WireFormatError(f"unsupported wire type {wire} in field {tag >> 3}")
        if tag < 8:
            raise WireFormatError("field number 0")
        if position > end:
            raise WireFormatError(f"field {tag >> 3} runs past the end of its message")
        fields.append((tag >> 3, wire, value))
    return fields


def text(value: int | bytes) -> str:
    """A string field's text (undecodable bytes replaced); "" for a field that is not bytes."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else ""


def signed64(value: int) -> int:
    """A negative int32/int64 is sent as a 64-bit two's complement varint."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value
