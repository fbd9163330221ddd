"""Plain data from a pickle, and the pickle bytes of a torch file, through pickle_decoder (which
imports and calls nothing): dicts, lists, tuples, strings, numbers, booleans and None; an object
becomes its state dict (or its single literal argument, e.g. an enum's value).
"""

from __future__ import annotations

import io
import os
import pickletools
import zipfile
from contextlib import nullcontext
from pathlib import Path
from typing import Any, BinaryIO

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.pickle_decoder import (
    PickledObject,
    UndecodablePickle,
    decode_pickle,
    key_text,
)
from tscope.ingest.safe_fs import open_regular

MAX_PICKLE_BYTES = 16 * 1024 * 1024  # TrainingArguments pickles are ~5 kB
MAX_PLAIN_NODES = 1_000_000  # values rebuilt from one pickle
MAX_DEPTH = 50
# What decoding may hold per byte of pickle (decode_pickle's charge), plus 1 MB: the bound of
# DCP metadata (dcp_metadata.DECODED_BYTES_PER_FILE_BYTE, measured there). training_args.bin
# charges 6x, the fixtures' torch files' data.pkl 7-15x (optimizer.pt, Lightning, DeepSpeed).
# Measured again on every data.pkl of the fixtures, the benchmark's checkpoints and two blind
# sets (session 29): 1x, 8x or 16x plus 4 kB. A byte of EMPTY_DICT charges ~72, so a 30 MB
# crafted optimizer.pt took gigabytes here and in torch's unpickler; the ceiling caps any one
# pickle and still admits a real 16 MB data.pkl (~100,000 tensors) at the largest ratio seen.
LITERALS_BYTES_PER_BYTE = 32
LITERALS_BYTES_FIXED = 1 << 20
LITERALS_BYTES_CEILING = 256 << 20


def decode_budget(pickle_bytes: int) -> int:
    """What decoding one pickle of this size may hold (decode_pickle's max_decoded_bytes)."""
    return min(
        LITERALS_BYTES_PER_BYTE * pickle_bytes + LITERALS_BYTES_FIXED, LITERALS_BYTES_CEILING
    )


def pickle_literals(payload: bytes) -> Any:
    """The pickle's top value as plain data; objects become their state dict (or their single
    literal argument, e.g. an enum's value). None if the stream cannot be decoded."""
    budget = decode_budget(len(payload))
    try:
        top = decode_pickle(payload, max_decoded_bytes=budget)
    except UndecodablePickle:
        return None
    return _plain(top)


def torch_file_literals(path: Path) -> Any:
    """pickle_literals of a torch.save zip file's data.pkl (or of a bare pickle file)."""
    payload = pickle_payload(path)
    return None if payload is None else pickle_literals(payload)


def pickle_strings(path: Path) -> set[str] | None:
    """The string constants of a torch file's pickle (its dict keys among them), or None when it
    cannot be read. The opcodes are scanned, never executed: this tells which top-level parts a
    checkpoint has (`model`, `optimizer`, `iter_num`, ...) without loading a tensor."""
    payload = pickle_payload(path)
    if payload is None:
        return None
    try:
        return {arg for _, arg, _ in pickletools.genops(payload) if isinstance(arg, str)}
    except Exception:  # a stranger's malformed pickle: any decode failure means "not inspectable"
        return None


def pickle_payload(source: Path | BinaryIO) -> bytes | None:
    """The pickle bytes of a torch file: a zip's data.pkl, or the whole (bare pickle) file;
    None when it cannot be read or is larger than MAX_PICKLE_BYTES. A path is opened once,
    never through a link and only as a regular file; a handle is read from its start."""
    try:
        with (
            open_regular(source, str(source))
            if isinstance(source, Path)
            else nullcontext(source) as handle
        ):
            handle.seek(0)
            if zipfile.is_zipfile(handle):
                handle.seek(0)
                with zipfile.ZipFile(handle) as archive:
                    return _data_pkl(archive)
            size = os.fstat(handle.fileno()).st_size
            if size > MAX_PICKLE_BYTES:
                return None
            handle.seek(0)
            return handle.read(size)
    except (OSError, zipfile.BadZipFile, ValueError, NotImplementedError, EOFError):
        return None
    except UnreadableInput:  # a link, a FIFO, a hollow file: not inspectable
        return None


def zip_pickle(payload: bytes) -> bytes | None:
    """data.pkl of a torch zip held in memory."""
    try:
        with zipfile.ZipFile(io.BytesIO(payload)) as archive:
            return _data_pkl(archive)
    except (OSError, zipfile.BadZipFile, ValueError, NotImplementedError, EOFError):
        return None


def _data_pkl(archive: zipfile.ZipFile) -> bytes | None:
    names = [n for n in archive.namelist() if n.endswith("data.pkl")]
    if not names or archive.getinfo(names[0]).file_size > MAX_PICKLE_BYTES:
        return None
    return archive.read(names[0])


def _plain(value: Any) -> Any:
    # Memo references can make a small pickle describe an exponentially large tree (each level
    # holding the previous one twice); the budget bounds the work whatever the file says.
    budget = [MAX_PLAIN_NODES]
    try:
        return _plain_within(value, 0, budget)
    except _TooLarge:
        return None


class _TooLarge(Exception):
    pass


def _plain_within(value: Any, depth: int, budget: list[int]) -> Any:
    budget[0] -= 1
    if budget[0] < 0:
        raise _TooLarge
    if depth > MAX_DEPTH:
        return None
    if isinstance(value, PickledObject):
        if isinstance(value.state, dict):
            return _plain_within(value.state, depth + 1, budget)
        if isinstance(value.state, tuple) and value.state and isinstance(value.state[-1], dict):
            return _plain_within(value.state[-1], depth + 1, budget)  # (dict, slots) state
        if value.items:
            return _plain_within(value.items, depth + 1, budget)
        literal = len(value.args) == 1 and not isinstance(
            value.args[0], (PickledObject, list, dict, tuple)
        )
        if literal:
            return value.args[0]  # enums and torch.device: their one literal argument
        return None
    if isinstance(value, dict):
        return {
            _plain_key(k, depth, budget): _plain_within(v, depth + 1, budget)
            for k, v in value.items()
        }
    if isinstance(value, (list, tuple)):
        return [_plain_within(v, depth + 1, budget) for v in value]
    if isinstance(value, (bytes, bytearray)):
        return None
    return value


def _plain_key(key: Any, depth: int, budget: list[int]) -> str:
    """Dict keys as strings; an object record used as a key is named by its plain form."""
    if isinstance(key, str):
        return key
    if isinstance(key, PickledObject):
        return key_text(_plain_within(key, depth + 1, budget))
    return key_text(key)  # a tuple key of shared strings: never a copy per reference
