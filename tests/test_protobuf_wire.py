"""The one protobuf wire-format decoder both the TensorBoard and the W&B readers use.

Messages are written by protobuf itself (tensorboard's generated Event class), then cut and
damaged: every failure must be a WireFormatError that says what was wrong.
"""

from __future__ import annotations

import struct

import pytest

from tscope.ingest.readers import event_proto
from tscope.ingest.readers.protobuf_wire import (
    FIXED32,
    FIXED64,
    LENGTH_DELIMITED,
    VARINT,
    WireFormatError,
    field_spans,
    field_values,
    signed64,
    text,
    varint,
)

event_pb2 = pytest.importorskip("tensorboard.compat.proto.event_pb2")
summary_pb2 = pytest.importorskip("tensorboard.compat.proto.summary_pb2")


def _event_bytes(step: int = -3, tag: str = "train/loss", value: float = 2.5) -> bytes:
    event = event_pb2.Event(wall_time=1_700_000_000.25, step=step)
    event.summary.value.add(tag=tag, simple_value=value)
    return bytes(event.SerializeToString())


def test_both_loops_read_the_same_fields_of_a_message_protobuf_wrote() -> None:
    data = _event_bytes()
    spans = field_spans(data, 0, len(data))
    values = field_values(data)
    assert [(n, w) for n, w, _, _ in spans] == [(n, w) for n, w, _ in values]
    assert [(n, w) for n, w, _ in values] == [(1, FIXED64), (2, VARINT), (5, LENGTH_DELIMITED)]
    wall = values[0][2]
    assert isinstance(wall, bytes) and struct.unpack("<d", wall)[0] == 1_700_000_000.25
    assert signed64(int(values[1][2])) == -3 == signed64(spans[1][2])
    summary = values[2][2]
    assert isinstance(summary, bytes)
    (_, _, value_message) = field_values(summary)[0]
    assert isinstance(value_message, bytes)
    inner = field_values(value_message)
    assert text(inner[0][2]) == "train/loss"
    assert inner[1][1] == FIXED32 and struct.unpack("<f", inner[1][2])[0] == 2.5


def test_event_proto_decodes_through_the_shared_loop() -> None:
    data = _event_bytes(step=7, tag="lr", value=0.125)
    event = event_proto.decode_event(data, 0, len(data))
    assert (event.step, event.wall_time) == (7, 1_700_000_000.25)
    assert [(v.tag, v.simple_value) for v in event.values] == [("lr", 0.125)]


def test_every_cut_of_a_message_is_refused_with_a_message_or_read() -> None:
    data = _event_bytes()
    for cut in range(1, len(data)):
        for decode in (lambda b: field_values(b), lambda b: field_spans(b, 0, len(b))):
            try:
                decode(data[:cut])
            except WireFormatError as error:
                assert str(error), f"no message at cut {cut}"


@pytest.mark.parametrize(
    ("damaged", "says"),
    [
        (b"\x08" + b"\xff" * 11, "longer than 10 bytes"),
        (b"\x08\x80", "cut short"),
        (b"\x00\x01", "field number 0"),
        (b"\x0b\x01", "unsupported wire type 3"),
        (b"\x0a\x05ab", "runs past the end"),
    ],
)
def test_damaged_bytes_say_what_is_wrong(damaged: bytes, says: str) -> None:
    for decode in (lambda b: field_values(b), lambda b: field_spans(b, 0, len(b))):
        with pytest.raises(WireFormatError, match=says):
            decode(damaged)


def test_varint_reads_the_longest_and_stops_at_the_end() -> None:
    longest = b"\xff" * 9 + b"\x01"
    assert varint(longest, 0, len(longest)) == ((1 << 64) - 1, 10)
    with pytest.raises(WireFormatError):
        varint(b"\x81\x81", 0, 1)
