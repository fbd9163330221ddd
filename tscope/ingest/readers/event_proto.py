"""Decoding TensorBoard `Event` protos from the protobuf wire format, without tensorflow.

Field numbers (DOMAIN.md §3, from tensorboard/compat/proto):
  Event{wall_time=1 double, step=2 int64, summary=5}
  Summary{value=1}
  Summary.Value{tag=1, simple_value=2 float, tensor=8 TensorProto, metadata=9 SummaryMetadata}
  SummaryMetadata{plugin_data=1 PluginData{plugin_name=1, content=2}}
  TensorProto{dtype=1, tensor_content=4, float_val=5, double_val=6, string_val=8}

Two decoders share the work. `decode_scalar_records` handles, for all records at once with numpy,
the layouts that make up nearly every record of a training log: one scalar per event, as
`SummaryWriter.add_scalar` writes it (plain `simple_value`, or `new_style` float/double tensors
with the "scalars" plugin). `decode_event` is a general field-by-field decoder for everything
else (the file-version event, text, hparams, TF2 tensors, several values per event), on the
wire-format loop every protobuf reader shares (protobuf_wire.py).
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field

import numpy as np

from tscope.ingest.readers.protobuf_wire import (
    FIXED32,
    FIXED64,
    LENGTH_DELIMITED,
    VARINT,
    WireFormatError,
    iter_spans,
    signed64,
)
from tscope.ingest.readers.tfrecord import byte_offset_view

# TensorFlow DataType enum values used by scalar summaries.
DT_FLOAT, DT_DOUBLE = 1, 2

_unpack_double = struct.Struct("<d").unpack_from
_unpack_float = struct.Struct("<f").unpack_from


# ---------------------------------------------------------------------------------------------
# Vectorized fast path.
#
# Every accepted record is exactly, byte for byte:
#   09 <wall_time f8>  [10 <step varint>]  2a <S>  0a <V>  0a <T> <tag: T bytes>  <value tail>
# with single-byte lengths S, V, T that add up to the record length, and a value tail of one of
# the layouts below (torch's summary.scalar output, measured with a hex dump of its files).


@dataclass(frozen=True)
class _ValueTail:
    before: bytes  # bytes between the tag and the number
    dtype: str  # the number's little-endian encoding
    after: bytes  # bytes after the number, up to the end of the record


_SCALARS_PLUGIN_METADATA = b"\x4a\x0b\x0a\x09\x0a\x07scalars"
_VALUE_TAILS = (
    _ValueTail(b"\x15", "<f4", b""),  # simple_value (add_scalar default)
    _ValueTail(b"\x42\x08\x08\x01\x2a\x04", "<f4", _SCALARS_PLUGIN_METADATA),  # new_style float
    _ValueTail(b"\x42\x0c\x08\x02\x32\x08", "<f8", _SCALARS_PLUGIN_METADATA),  # new_style double
)
# A step varint is read as one 8-byte word: up to 8 varint bytes, i.e. steps below 2**56 (larger
# or negative steps take the general decoder).
_CONTINUATION_BITS = np.uint64(0x8080808080808080)
_PAYLOAD_BITS = np.uint64(0x7F7F7F7F7F7F7F7F)
# The summary header `2a S 0a V 0a T` read as one little-endian word: the fixed bytes must match.
_SUMMARY_HEADER_MASK = np.uint64(0xFF00FF00FF)
_SUMMARY_HEADER_BYTES = np.uint64(0x0A000A002A)
# Shorter records take the general decoder, so the fast path's 8-byte reads stay inside the file.
_MIN_FAST_RECORD_BYTES = 22


@dataclass(frozen=True)
class ScalarRecords:
    """The records the fast path decoded: one scalar each."""

    record_index: np.ndarray  # (n,) int64, index into the framed records
    step: np.ndarray  # (n,) int64
    value: np.ndarray  # (n,) float64
    tag_start: np.ndarray  # (n,) int64, byte offsets of the tag in the file
    tag_end: np.ndarray  # (n,) int64
    value_start: np.ndarray  # (n,) int64, byte offset of the number in the file
    # (n,) int64: the first of these records known to hold the same tag bytes (scalar_runs), else
    # the record itself; grouping the tags then only compares the distinct ones.
    tag_like: np.ndarray


def decode_scalar_records(buffer: bytes, starts: np.ndarray, lengths: np.ndarray) -> ScalarRecords:
    """Decode the one-scalar records among `starts`/`lengths`; the rest are left to decode_event.

    Each check narrows the candidate set, so rare layouts cost little on a typical file.
    """
    candidates = np.flatnonzero(lengths >= _MIN_FAST_RECORD_BYTES)
    if candidates.size == 0:
        empty = np.empty(0, dtype=np.int64)
        return ScalarRecords(
            empty, empty, np.empty(0, dtype=np.float64), empty, empty, empty, empty
        )
    bytes_at = np.frombuffer(buffer, dtype=np.uint8)
    words_at = byte_offset_view(buffer, "<u8")
    start = starts[candidates]
    end = start + lengths[candidates]

    has_step = bytes_at[start + 9] == 0x10
    step, step_bytes = _decode_varint_words(words_at[start + 10])
    summary_at = np.where(has_step, start + 10 + step_bytes, start + 9)
    header = words_at[summary_at]
    summary_length = ((header >> np.uint64(8)) & np.uint64(0xFF)).astype(np.int64)
    value_length = ((header >> np.uint64(24)) & np.uint64(0xFF)).astype(np.int64)
    tag_length = ((header >> np.uint64(40)) & np.uint64(0xFF)).astype(np.int64)
    accepted = (bytes_at[start] == 0x09) & (~has_step | (step_bytes > 0))
    accepted &= (header & _SUMMARY_HEADER_MASK) == _SUMMARY_HEADER_BYTES
    accepted &= (summary_length < 0x80) & (value_length < 0x80) & (tag_length < 0x80)
    accepted &= (summary_at + 2 + summary_length == end) & (summary_at + 4 + value_length == end)

    kept = np.flatnonzero(accepted)
    candidates, end, step = candidates[kept], end[kept], np.where(has_step, step, 0)[kept]
    tag_start = summary_at[kept] + 6
    tag_end = tag_start + tag_length[kept]

    value = np.full(candidates.shape, np.nan, dtype=np.float64)
    value_start = np.zeros(candidates.shape, dtype=np.int64)
    matched = np.zeros(candidates.shape, dtype=bool)
    for tail in _VALUE_TAILS:
        width = np.dtype(tail.dtype).itemsize
        pending = np.flatnonzero(~matched)
        number_at = tag_end[pending] + len(tail.before)
        fits = number_at + width + len(tail.after) == end[pending]
        pending, number_at = pending[fits], number_at[fits]
        fits = _bytes_match(buffer, tag_end[pending], tail.before)
        fits &= _bytes_match(buffer, number_at + width, tail.after)
        pending, number_at = pending[fits], number_at[fits]
        with np.errstate(invalid="ignore"):  # a signalling NaN in the file stays a NaN
            value[pending] = byte_offset_view(buffer, tail.dtype)[number_at]
        value_start[pending] = number_at
        matched[pending] = True

    chosen = np.flatnonzero(matched)
    return ScalarRecords(
        record_index=candidates[chosen].astype(np.int64),
        step=step[chosen],
        value=value[chosen],
        tag_start=tag_start[chosen],
        tag_end=tag_end[chosen],
        value_start=value_start[chosen],
        tag_like=np.arange(chosen.size, dtype=np.int64),
    )


def value_dtype(bytes_before_value: int, bytes_from_value_to_end: int) -> str:
    """The number's encoding in a record decode_scalar_records accepted, from its geometry (the
    value tails all differ in size): the bytes between tag and number, and from number to end."""
    for tail in _VALUE_TAILS:
        width = np.dtype(tail.dtype).itemsize
        if (len(tail.before), width + len(tail.after)) == (
            bytes_before_value,
            bytes_from_value_to_end,
        ):
            return tail.dtype
    raise ValueError("not the geometry of an accepted scalar record")


def _bytes_match(buffer: bytes, offsets: np.ndarray, expected: bytes) -> np.ndarray:
    """Whether buffer[offset : offset + len(expected)] == expected, for every offset at once."""
    matches = np.ones(offsets.shape, dtype=bool)
    words_at = byte_offset_view(buffer, "<u8")
    last_word = len(buffer) - 8
    for chunk_start in range(0, len(expected), 8):
        chunk = expected[chunk_start : chunk_start + 8]
        mask = np.uint64((1 << (8 * len(chunk))) - 1)
        # A read clipped at the end of the file sees other bytes and simply fails to match.
        words = words_at[np.minimum(offsets + chunk_start, last_word)]
        matches &= (words & mask) == np.uint64(int.from_bytes(chunk, "little"))
    return matches


def _decode_varint_words(words: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Varints that start each little-endian 8-byte word: (value as int64, bytes used; 0 = longer).

    The first byte without its continuation bit ends the varint; its 7-bit groups are packed
    together, lowest first.
    """
    terminators = ~words & _CONTINUATION_BITS
    lowest = terminators & (~terminators + np.uint64(1))  # isolate the first terminating byte
    found = lowest != 0
    byte_count = np.zeros(words.shape, dtype=np.int64)
    byte_count[found] = (np.log2(lowest[found].astype(np.float64)).astype(np.int64) - 7) // 8 + 1
    keep = (lowest << np.uint64(1)) - np.uint64(1)  # all bits up to the terminating byte's top bit
    payload = words & keep & _PAYLOAD_BITS
    value = np.zeros(words.shape, dtype=np.uint64)
    longest = int(byte_count.max()) if byte_count.size else 0
    for group in range(longest):
        seven_bits = (payload >> np.uint64(8 * group)) & np.uint64(0x7F)
        value |= seven_bits << np.uint64(7 * group)
    return value.astype(np.int64), byte_count


# ---------------------------------------------------------------------------------------------
# General decoder.
#
# Each message is walked one field at a time (iter_spans) and only what the reader uses is kept.
# Its fields are counted against a bound from what writers put in it; past it the record is
# refused (TooManyFields: listed in `partial`), which also bounds the time a crafted record of
# 2-byte fields takes (red team, session 29: 10 MB of empty values took 1.5 GB and 13 s).

# Event, Summary.Value, SummaryMetadata, PluginData and the hparams map entries declare at most
# ten fields, of which writers set two to four (none of them repeated).
MAX_MESSAGE_FIELDS = 64
# Values in one Summary: torch's SummaryWriter and TF2's tf.summary write one per event; TF1's
# merge_all merges every summary op of the graph into one Summary a step, hundreds to a few
# thousand values for the largest models.
MAX_SUMMARY_VALUES = 100_000
# Fields of a TensorProto or of an hparams map: numeric repeated fields are packed (one field) by
# every serializer, string_val is a field a string (tf.summary.text of a table: one a cell, shown
# as one HTML table), the map an entry a hyperparameter.
MAX_LIST_FIELDS = 100_000
# Numbers kept from a tensor's float_val/double_val: the reader only asks whether the tensor is
# one number, and two tell (a 4 MB tensor was a list of a million Python floats, 8x its bytes).
_KEPT_NUMBERS = 2


@dataclass(slots=True)
class TensorValue:
    dtype: int = 0
    float_val: list[float] = field(default_factory=list)  # at most _KEPT_NUMBERS
    double_val: list[float] = field(default_factory=list)  # at most _KEPT_NUMBERS
    content: bytes = b""
    string_val: list[bytes] = field(default_factory=list)  # the first only (add_text_config)

    def scalar(self) -> float | None:
        """The single float/double the tensor holds, or None if it is not one number."""
        if self.dtype == DT_FLOAT:
            if len(self.float_val) == 1:
                return self.float_val[0]
            if len(self.content) == 4:
                return float(_unpack_float(self.content)[0])
        elif self.dtype == DT_DOUBLE:
            if len(self.double_val) == 1:
                return self.double_val[0]
            if len(self.content) == 8:
                return float(_unpack_double(self.content)[0])
        return None


@dataclass(slots=True)
class SummaryValue:
    tag: str = ""
    simple_value: float | None = None
    tensor: TensorValue | None = None
    plugin_name: str | None = None
    plugin_content: bytes = b""

    def holds_data(self) -> bool:
        """Whether the reader can use the value (a tag alone, or an image, it cannot)."""
        has_number = self.simple_value is not None or self.tensor is not None
        return has_number or self.plugin_name is not None


@dataclass(slots=True)
class Event:
    wall_time: float | None = None
    step: int = 0
    # Only values that hold data (SummaryValue.holds_data): empty ones are skipped.
    values: list[SummaryValue] = field(default_factory=list)


def decode_event(buffer: bytes, start: int, end: int) -> Event:
    """Decode one Event; raises WireFormatError on malformed bytes or absurd field counts."""
    event = Event()
    for number, wire_type, value, value_end in iter_spans(
        buffer, start, end, MAX_MESSAGE_FIELDS, "an Event"
    ):
        if number == 1 and wire_type == FIXED64:
            event.wall_time = float(_unpack_double(buffer, value)[0])
        elif number == 2 and wire_type == VARINT:
            event.step = signed64(value)
        elif number == 5 and wire_type == LENGTH_DELIMITED:
            for inner, inner_type, inner_start, inner_end in iter_spans(
                buffer, value, value_end, MAX_SUMMARY_VALUES, "a Summary"
            ):
                # An empty value is two bytes on disk and would be an object of ~200.
                if inner == 1 and inner_type == LENGTH_DELIMITED and inner_end > inner_start:
                    summary_value = _decode_value(buffer, inner_start, inner_end)
                    if summary_value.holds_data():
                        event.values.append(summary_value)
    return event


def _decode_value(buffer: bytes, start: int, end: int) -> SummaryValue:
    summary_value = SummaryValue()
    for number, wire_type, value, value_end in iter_spans(
        buffer, start, end, MAX_MESSAGE_FIELDS, "a Summary.Value"
    ):
        if number == 1 and wire_type == LENGTH_DELIMITED:
            summary_value.tag = buffer[value:value_end].decode("utf-8", errors="replace")
        elif number == 2 and wire_type == FIXED32:
            summary_value.simple_value = float(_unpack_float(buffer, value)[0])
        elif number == 8 and wire_type == LENGTH_DELIMITED:
            summary_value.tensor = _decode_tensor(buffer, value, value_end)
        elif number == 9 and wire_type == LENGTH_DELIMITED:
            for inner, inner_type, inner_start, inner_end in iter_spans(
                buffer, value, value_end, MAX_MESSAGE_FIELDS, "a SummaryMetadata"
            ):
                if inner == 1 and inner_type == LENGTH_DELIMITED:
                    _decode_plugin_data(buffer, inner_start, inner_end, summary_value)
    return summary_value


def _decode_plugin_data(buffer: bytes, start: int, end: int, into: SummaryValue) -> None:
    for number, wire_type, value, value_end in iter_spans(
        buffer, start, end, MAX_MESSAGE_FIELDS, "a PluginData"
    ):
        if number == 1 and wire_type == LENGTH_DELIMITED:
            into.plugin_name = buffer[value:value_end].decode("utf-8", errors="replace")
        elif number == 2 and wire_type == LENGTH_DELIMITED:
            into.plugin_content = buffer[value:value_end]


def _decode_tensor(buffer: bytes, start: int, end: int) -> TensorValue:
    tensor = TensorValue()
    for number, wire_type, value, value_end in iter_spans(
        buffer, start, end, MAX_LIST_FIELDS, "a TensorProto"
    ):
        if number == 1 and wire_type == VARINT:
            tensor.dtype = value
        elif number == 4 and wire_type == LENGTH_DELIMITED:
            tensor.content = buffer[value:value_end]
        elif number == 5:
            _add_numbers(tensor.float_val, buffer, wire_type, value, value_end, "f")
        elif number == 6:
            _add_numbers(tensor.double_val, buffer, wire_type, value, value_end, "d")
        elif number == 8 and wire_type == LENGTH_DELIMITED and not tensor.string_val:
            tensor.string_val.append(buffer[value:value_end])
    return tensor


def _add_numbers(
    into: list[float], buffer: bytes, wire_type: int, value: int, value_end: int, code: str
) -> None:
    """Up to _KEPT_NUMBERS numbers of a float ("f") or double ("d") field, packed or not."""
    width = struct.calcsize(code)
    single_type = FIXED32 if code == "f" else FIXED64
    room = _KEPT_NUMBERS - len(into)
    if wire_type == LENGTH_DELIMITED:
        if (value_end - value) % width:
            raise WireFormatError("packed field length is not a multiple of its element size")
        count = min((value_end - value) // width, max(room, 0))
        into.extend(float(x) for x in struct.unpack_from(f"<{count}{code}", buffer, value))
    elif wire_type == single_type:
        if room > 0:
            into.append(float(struct.unpack_from(f"<{code}", buffer, value)[0]))
    else:
        raise WireFormatError("unexpected wire type for a float field")


def decode_hparams(content: bytes) -> dict[str, object]:
    """`HParamsPluginData.session_start_info.hparams` (field 3, then map field 1), or {}.

    Each map entry is {key=1 string, value=2 google.protobuf.Value{number=2, string=3, bool=4}}.
    """
    hparams: dict[str, object] = {}
    for number, wire_type, value, value_end in iter_spans(
        content, 0, len(content), MAX_MESSAGE_FIELDS, "an HParamsPluginData"
    ):
        if number != 3 or wire_type != LENGTH_DELIMITED:
            continue
        for entry, entry_type, entry_start, entry_end in iter_spans(
            content, value, value_end, MAX_LIST_FIELDS, "a SessionStartInfo"
        ):
            if entry != 1 or entry_type != LENGTH_DELIMITED:
                continue
            key: str | None = None
            setting: object = None
            for part, part_type, part_start, part_end in iter_spans(
                content, entry_start, entry_end, MAX_MESSAGE_FIELDS, "an hparams entry"
            ):
                if part == 1 and part_type == LENGTH_DELIMITED:
                    key = content[part_start:part_end].decode("utf-8", errors="replace")
                elif part == 2 and part_type == LENGTH_DELIMITED:
                    setting = _decode_struct_value(content, part_start, part_end)
            if key is not None:
                hparams[key] = setting
    return hparams


def _decode_struct_value(buffer: bytes, start: int, end: int) -> object:
    setting: object = None
    for number, wire_type, value, value_end in iter_spans(
        buffer, start, end, MAX_MESSAGE_FIELDS, "a google.protobuf.Value"
    ):
        if number == 2 and wire_type == FIXED64:
            setting = float(_unpack_double(buffer, value)[0])
        elif number == 3 and wire_type == LENGTH_DELIMITED:
            setting = buffer[value:value_end].decode("utf-8", errors="replace")
        elif number == 4 and wire_type == VARINT:
            setting = bool(value)
    return setting
