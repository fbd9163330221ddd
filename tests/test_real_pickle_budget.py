"""safe_load._is_real_pickle (asked when torch's weights-only reader stops at an opcode it does
not implement) decodes within the decoders' memory bound: a stream of 1-byte opcodes that each
build a 64-byte object holds far more than the file, and is no pickle to offer --trust-pickle for.
"""

from __future__ import annotations

from tscope.ingest.checkpoints.safe_load import _is_real_pickle

EMPTY_DICTS = 400_000  # 400 kB of `}`: about 30 MB held, the bound is 32x + 1 MB = 13.8 MB


def test_a_stream_past_the_memory_bound_is_not_a_real_pickle() -> None:
    crafted = b"\x80\x02](" + b"}" * EMPTY_DICTS + b"e."
    assert not _is_real_pickle(crafted)


def test_a_small_real_stream_is_one() -> None:
    assert _is_real_pickle(b"\x80\x02](" + b"}" * 100 + b"e.")
