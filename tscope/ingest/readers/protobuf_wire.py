"""The protobuf wire format, read without generated classes: one decoder for every reader.

TensorBoard `Event`s (event_proto.py) and W&B `Record`s (wandb_records.py) are both protobuf
messages read from a stranger's file, so both go through these two loops and fail the same way:
a `WireFormatError` that says what was wrong, never an IndexError or a hang.

- `iter_spans(buffer, start, end)` / `field_spans`: (number, wire type, value, value end) with
  byte offsets, for nested messages decoded in place (no copy of a sub-message); the iterator
  holds one field at a time.
- `field_values(buffer)`: (number, wire type, value) with the bytes of each length-delimited or
  fixed field cut out, one-byte tags and lengths decoded inline (a W&B run has millions of fields
  and a call per varint doubled its reading time).

Every walk counts the fields of the message and stops with `TooManyFields` past `max_fields`:
a field can be 2 bytes on disk and ~100 bytes as Python objects, so a crafted message of
millions of empty fields cost 40-150x its size (red team, session 29). Each caller bounds its
messages by what real producers write in them; `field_values` also skips, without cutting them
out, the fields a caller does not read (`wanted`).
"""

from __future__ import annotations

from collections.abc import Iterator

# Wire types (https://protobuf.dev/programming-guides/encoding/); groups (3, 4) are not used by
# any message tscope reads and are refused.
VARINT, FIXED64, LENGTH_DELIMITED, FIXED32 = 0, 1, 2, 5
_MAX_VARINT_SHIFT = 63  # ten 7-bit groups: the longest varint (a 64-bit value)


# The bound of a caller that names none: ~100 MB of listed fields at most. tscope's readers name
# their own, from what the producers of each message write.
DEFAULT_MAX_FIELDS = 1_000_000


class WireFormatError(ValueError):
    """The bytes are not a well-formed protobuf message; the message says what was wrong."""


class TooManyFields(WireFormatError):
    """A message holds more fields than any producer writes in it: crafted or damaged."""

    def __init__(self, what: str, max_fields: int) -> None:
        super().__init__(
            f"{what} of more than {max_fields:,} fields (no writer puts that many in one; "
            "the record is crafted or damaged)"
        )


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


def field_spans(
    buffer: bytes,
    start: int,
    end: int,
    max_fields: int = DEFAULT_MAX_FIELDS,
    what: str = "a message",
) -> list[tuple[int, int, int, int]]:
    """(field number, wire type, value, value end) of each field in buffer[start:end], as a list
    (`iter_spans` holds one at a time)."""
    return list(iter_spans(buffer, start, end, max_fields, what))


def iter_spans(
    buffer: bytes,
    start: int,
    end: int,
    max_fields: int = DEFAULT_MAX_FIELDS,
    what: str = "a message",
) -> Iterator[tuple[int, int, int, int]]:
    """(field number, wire type, value, value end) of each field in buffer[start:end].

    `value` is the decoded integer for varints, else the byte offset where the value starts.
    Raises TooManyFields (naming the message as `what`) at field `max_fields` + 1.
    """
    position = start
    left = max_fields
    while position < end:
        left -= 1
        if left < 0:
            raise TooManyFields(what, max_fields)
        key, position = varint(buffer, position, end)
        number, wire_type = key >> 3, key & 7
        if number == 0:
            raise WireFormatError(f"field number 0 at byte {position}")
        if wire_type == VARINT:
            value, position = varint(buffer, position, end)
            yield number, wire_type, value, position
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
        yield number, wire_type, position, value_end
        position = value_end


def field_values(
    buffer: bytes,
    max_fields: int = DEFAULT_MAX_FIELDS,
    what: str = "a message",
    wanted: frozenset[int] | None = None,
) -> list[tuple[int, int, int | bytes]]:
    """(field number, wire type, value) of each field of a whole message: ints for varints,
    the field's bytes for everything else. Only fields numbered in `wanted` are listed (all when
    None); every field counts towards `max_fields` (TooManyFields past it, naming `what`)."""
    fields: list[tuple[int, int, int | bytes]] = []
    position, end = 0, len(buffer)
    left = max_fields
    while position < end:
        left -= 1
        if left < 0:
            raise TooManyFields(what, max_fields)
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
            if wanted is None or tag >> 3 in wanted:
                value = buffer[position : position + length]
            else:
                value = b""  # a field the caller does not read is stepped over, not copied
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
        if wanted is None or tag >> 3 in wanted:
            fields.append((tag >> 3, wire, value))
    return fields


def text(value: int | bytes) -> str:
    """A string field's text (undecodable bytes replaced); "" for a field that is not bytes."""
    return value.decode("utf-8", errors="replace") if isinstance(value, bytes) else ""


def signed64(value: int) -> int:
    """A negative int32/int64 is sent as a 64-bit two's complement varint."""
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value
