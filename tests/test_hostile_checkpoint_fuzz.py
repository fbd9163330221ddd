"""Property-based fuzzing of the checkpoint parsers (issue 9, checkpoint side): random pickle
opcodes, truncated and bit-flipped DCP metadata, safetensors headers and RNG states: each parser
returns data or raises UnreadableInput (None for pickle_literals, which never raises), and never
runs anything (docs/security.md).
"""

from __future__ import annotations

import json
import pickle
from pathlib import Path

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions

OPTIONS = LoadOptions()
LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layouts"

REAL_METADATA = (LAYOUTS / "dcp_fsdp2_2ranks" / "step-4" / ".metadata").read_bytes()
# Single-byte opcodes and opcodes with short arguments, to build streams the decoder must follow.
OPCODES = [bytes([code]) for code in b"().0123NIJKLMVXTUabcdeghijlpqrstu}]~\x80\x81\x85\x86\x87"]
OPCODES += [b"\x93", b"\x94", b"\x95\x05\x00\x00\x00\x00\x00\x00\x00", b"\x8c\x03abc"]


def damaged(data: bytes, cut: int, flips: list[int]) -> bytes:
    out = bytearray(data[: max(cut, 1)])
    for position in flips:
        out[position % len(out)] ^= 0xFF
    return bytes(out)


random_opcodes = st.lists(
    st.one_of(st.sampled_from(OPCODES), st.binary(max_size=4)), max_size=60
).map(lambda parts: b"\x80\x04" + b"".join(parts))


@settings(max_examples=300, deadline=None)
@given(
    cut=st.integers(1, len(REAL_METADATA)),
    flips=st.lists(st.integers(0, len(REAL_METADATA) - 1), max_size=4),
    noise=random_opcodes,
    use_noise=st.booleans(),
)
def test_fuzzed_dcp_metadata_is_data_or_unreadable_input(cut, flips, noise, use_noise):
    from tscope.ingest.checkpoints.dcp_metadata import DcpMetadata
    from tscope.ingest.checkpoints.dcp_storage import metadata_from_bytes

    payload = noise if use_noise else damaged(REAL_METADATA, cut, flips)
    try:
        parsed = metadata_from_bytes(payload, "step-4/.metadata", OPTIONS)
    except UnreadableInput:
        return
    assert isinstance(parsed, DcpMetadata)
    assert all(isinstance(entry.size, tuple) for entry in parsed.tensors.values())


@settings(max_examples=300, deadline=None)
@given(noise=random_opcodes, cut=st.integers(1, 4096), flips=st.lists(st.integers(0, 4095)))
def test_fuzzed_training_args_decode_to_plain_data_or_none(noise, cut, flips):
    from tscope.ingest.checkpoints.pickle_literals import pickle_literals

    real = pickle.dumps({"learning_rate": 3e-4, "fp16": True, "seed": 42, "xs": [1, 2]}, 4)
    for payload in (noise, damaged(real, cut, flips)):
        value = pickle_literals(payload)
        assert value is None or isinstance(value, (dict, list, str, int, float, bool, bytes))


def _real_safetensors_header() -> bytes:
    header = {
        "__metadata__": {"step": "5"},
        "a.weight": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]},
        "b.bias": {"dtype": "BF16", "shape": [3], "data_offsets": [16, 22]},
    }
    return json.dumps(header).encode()


SAFETENSORS_HEADER = _real_safetensors_header()


@settings(max_examples=300, deadline=None)
@given(
    cut=st.integers(1, len(SAFETENSORS_HEADER)),
    flips=st.lists(st.integers(0, len(SAFETENSORS_HEADER) - 1), max_size=4),
    noise=st.binary(max_size=200),
    use_noise=st.booleans(),
    data_size=st.integers(0, 64),
)
@example(cut=1, flips=[], noise=b"[" * 100_000, use_noise=True, data_size=0)
def test_fuzzed_safetensors_headers_are_data_or_unreadable_input(
    cut, flips, noise, use_noise, data_size
):
    from tscope.ingest.checkpoints.safetensors_header import parse_header

    raw = noise if use_noise else damaged(SAFETENSORS_HEADER, cut, flips)
    try:
        header = parse_header(raw, 8 + len(raw), 8 + len(raw) + data_size, "x.safetensors")
    except UnreadableInput:
        return
    for entry in header.entries:  # whatever was accepted lies inside the file
        assert 8 + len(raw) <= entry.start <= entry.end <= 8 + len(raw) + data_size


RNG_FILE = next(iter(sorted((LAYOUTS.parent).rglob("rng_state.pth"))), None)


@pytest.mark.skipif(RNG_FILE is None, reason="no rng_state.pth fixture")
@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_fuzzed_rng_state_files_are_states_or_unreadable_input(tmp_path, data):
    from tscope.ingest.checkpoints.rng_state import read_rng_state

    assert RNG_FILE is not None
    real = RNG_FILE.read_bytes()
    cut = data.draw(st.integers(1, len(real)))
    flips = data.draw(st.lists(st.integers(0, len(real) - 1), max_size=4))
    target = tmp_path / "rng_state.pth"
    target.write_bytes(damaged(real, cut, flips))
    try:
        state = read_rng_state(target, "checkpoint-1/rng_state.pth", OPTIONS)
    except UnreadableInput:
        return
    assert "numpy" not in state or len(state["numpy"][1]) == 624
