"""What decoding a DCP `.metadata` may hold in memory, whatever its opcodes build (red team).

One EMPTY_DICT byte builds a 64-byte dict: 40 MB of `}` held 3.1 GB (75x), a list of 40 MB of
them 5.2 GB (the foreign-global walk's `seen` set on top), and a 265 kB file whose dict key is a
list of 100,000 references to one 64 kB string held 6.4 GB (the key's repr copied the string per
reference). The decoder now charges what each opcode builds and refuses past
DECODED_BYTES_PER_FILE_BYTE x the file size (40 MB: ~1.3 GB peak RSS, measured); torch's own
metadata charges 13-18x and peaks at 11-15x. The budget is lowered here (no fixed allowance) so
that ~60 kB files show each shape quickly.
"""

from __future__ import annotations

import struct
import tracemalloc
from pathlib import Path

import pytest

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints import dcp_metadata
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.dcp_storage import metadata_from_bytes
from tscope.ingest.checkpoints.pickle_decoder import DecodeBudgetExceeded, decode_pickle

LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layouts"
REAL_METADATA = LAYOUTS / "dcp_single" / "step_2" / ".metadata"
PROTO_4 = b"\x80\x04"
SIZE = 60_000


def crafted(shape: str, size: int = SIZE) -> bytes:
    """~`size` bytes of one shape of 1- and 2-byte opcodes, ending in STOP."""
    big_string = b"X" + struct.pack("<I", 1 << 16) + b"a" * (1 << 16) + b"q\x00"
    bodies = {
        "empty dicts on the stack": b"}" * size,
        "empty dicts in a list": b"](" + b"}" * size + b"e",
        "lists nested in lists": b"]" * (size // 2) + b"a" * (size // 2 - 1),
        "memoized dicts": b"}\x94" * (size // 2),
        "1-tuples in a list": b"(" + b"K\x01\x85" * (size // 3) + b"l",
        "short strings in a list": b"(" + b"\x8c\x02ab" * (size // 4) + b"l",
        "memo entries of one value": b"N" + b"\x94" * size,
        "references to one memoized string": big_string + b"(" + b"h\x00" * (size // 2) + b"l",
    }
    return PROTO_4 + bodies[shape] + b"."


@pytest.fixture
def no_fixed_allowance(monkeypatch):
    monkeypatch.setattr(dcp_metadata, "DECODED_BYTES_FIXED", 0)


SHAPES = (
    "empty dicts on the stack",
    "empty dicts in a list",
    "lists nested in lists",
    "memoized dicts",
    "1-tuples in a list",
    "short strings in a list",
    "memo entries of one value",
    "references to one memoized string",
)


@pytest.mark.parametrize("shape", SHAPES)
def test_no_crafted_shape_holds_more_than_the_budget(shape, no_fixed_allowance):
    """Refused once past the budget, or decoded (then refused as no Metadata) within it: the
    traced peak stays below the budget plus the decoder's transients, never the 75x of before."""
    payload = crafted(shape)
    tracemalloc.start()
    try:
        with pytest.raises((DecodeBudgetExceeded, dcp_metadata.NotDcpMetadata)):
            dcp_metadata.parse_metadata(payload)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    budget = dcp_metadata.decoded_bytes_budget(len(payload))
    assert peak < budget * 1.25 + 64_000, f"{shape}: {peak / len(payload):.1f}x the file"


def test_one_byte_opcodes_are_refused_with_the_file_named_and_the_way_out(no_fixed_allowance):
    with pytest.raises(UnreadableInput) as refused:
        metadata_from_bytes(crafted("empty dicts on the stack"), "step-4/.metadata", LoadOptions())
    message = str(refused.value)
    assert message.startswith("Cannot read step-4/.metadata: it describes more objects than")
    assert "--trust-pickle" in message
    assert "\n" not in message


def test_a_real_metadata_file_fits_the_budget_with_room():
    payload = REAL_METADATA.read_bytes()
    # half the budget: torch's own files charge 13-18x of the 32x allowed
    half = (dcp_metadata.decoded_bytes_budget(len(payload)) - dcp_metadata.DECODED_BYTES_FIXED) // 2
    decode_pickle(payload, max_opcodes=len(payload) + 1, max_decoded_bytes=half)
    assert dcp_metadata.parse_metadata(payload).tensors


def test_trust_pickle_reads_a_file_past_the_budget_as_torch_would(monkeypatch):
    payload = REAL_METADATA.read_bytes()
    monkeypatch.setattr(dcp_metadata, "DECODED_BYTES_PER_FILE_BYTE", 1)
    monkeypatch.setattr(dcp_metadata, "DECODED_BYTES_FIXED", 0)
    with pytest.raises(UnreadableInput, match="more objects than"):
        metadata_from_bytes(payload, "m", LoadOptions())
    trusted = metadata_from_bytes(payload, "m", LoadOptions(trust_pickle=True))
    monkeypatch.undo()
    assert trusted == dcp_metadata.parse_metadata(payload)


def test_an_unhashable_key_of_shared_references_is_kept_as_a_short_text():
    """A list of 100,000 references to one 64 kB string as a dict key: its repr was 6.4 GB."""
    string = b"X" + struct.pack("<I", 1 << 16) + b"a" * (1 << 16) + b"q\x00"
    payload = PROTO_4 + string + b"}(" + b"h\x00" * 100_000 + b"lNs."
    (key,) = decode_pickle(payload)
    assert len(key) < 300


def test_a_foreign_global_is_refused_as_it_is_decoded_even_when_unreachable():
    payload = PROTO_4 + b"\x8c\x02os\x8c\x06system\x930N."  # the global is popped at once
    with pytest.raises(dcp_metadata.NotDcpMetadata) as refused:
        dcp_metadata.parse_metadata(payload)
    assert refused.value.foreign_global == "os.system"


def test_training_args_literals_share_the_bound(monkeypatch):
    """pickle_literals (training_args.bin, torch files' keys) decodes within the same budget:
    a file past it is "cannot be decoded" (None), as a damaged one."""
    from tscope.ingest.checkpoints import pickle_literals

    monkeypatch.setattr(pickle_literals, "LITERALS_BYTES_FIXED", 0)
    assert pickle_literals.pickle_literals(crafted("empty dicts in a list")) is None
    assert pickle_literals.pickle_literals(
        PROTO_4 + b"}\x8c\x02lr" + b"G?\x1a6\xe2\xeb\x1cC-s."
    ) == {"lr": 1e-4}
