"""The safetensors header, read once and checked, and single tensors read by byte range.

Layout (safetensors docs, "Format"): an 8-byte little-endian header length N, N bytes of JSON
`{"__metadata__": {str: str}, name: {"dtype": "F32", "shape": [..], "data_offsets": [b, e]}}`,
then the data; offsets count from the end of the header. The safetensors library re-parses the
whole header on every `safe_open`, so reading tensors one at a time cost O(tensors^2) (a file of
20,000 small tensors ran past ten minutes). Here the header is parsed once into `HeaderEntry`s and
each tensor is read with one seek and one read of exactly its bytes.
"""

from __future__ import annotations

import math
import os
import struct
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope.errors import UnreadableInput
from tscope.ingest.lfs_pointer import refuse_lfs_pointer
from tscope.ingest.safe_fs import open_regular
from tscope.model.json_parse import RefusedJson, parse

if TYPE_CHECKING:
    import torch

# The safetensors library refuses headers over 100 MB (safetensors/src/tensor.rs MAX_HEADER_SIZE).
MAX_HEADER_BYTES = 100_000_000
# What the parsed header may take per header byte (json_parse.parsed_size_estimate). Every real
# header measured estimates at 7.3-9.4x its bytes (118 files: the fixtures, a benchmark block,
# a blind set); a short-named 4-D tensor's entry reaches ~13x. A header of 3-byte `{},` values
# estimates at 26x: 99 MB of them took 2.5 GB before it was refused (red team round 8).
HEADER_PARSED_PER_BYTE = 16
# safetensors dtype -> (torch attribute, bytes per element)
DTYPES = {
    "BOOL": ("bool", 1),
    "U8": ("uint8", 1),
    "I8": ("int8", 1),
    "F8_E4M3": ("float8_e4m3fn", 1),
    "F8_E5M2": ("float8_e5m2", 1),
    "I16": ("int16", 2),
    "U16": ("uint16", 2),
    "F16": ("float16", 2),
    "BF16": ("bfloat16", 2),
    "I32": ("int32", 4),
    "U32": ("uint32", 4),
    "F32": ("float32", 4),
    "F64": ("float64", 8),
    "I64": ("int64", 8),
    "U64": ("uint64", 8),
}
MAX_DIMS = 16


@dataclass(frozen=True)
class HeaderEntry:
    name: str
    dtype: str  # the safetensors code: "F32", "BF16"
    shape: tuple[int, ...]
    start: int  # absolute byte offsets in the file
    end: int


@dataclass(frozen=True)
class SafetensorsHeader:
    metadata: dict[str, str]
    entries: list[HeaderEntry]  # in header order; checked to tile the data region


def read_header(path: Path, display_path: str) -> SafetensorsHeader:
    """The file's checked header; UnreadableInput for anything malformed."""
    refuse_lfs_pointer(path, display_path)
    with open_regular(path, display_path) as handle:
        size = os.fstat(handle.fileno()).st_size
        head = handle.read(8)
        if len(head) < 8:
            raise _bad(display_path, "shorter than its 8-byte header length")
        (length,) = struct.unpack("<Q", head)
        if length > MAX_HEADER_BYTES or 8 + length > size:
            raise _bad(display_path, f"declares a {length}-byte header in a {size}-byte file")
        raw = handle.read(length)
    return parse_header(raw, 8 + length, size, display_path)


def parse_header(
    raw: bytes, data_start: int, file_size: int, display_path: str
) -> SafetensorsHeader:
    """Check and index a header's JSON; offsets are made absolute (data_start + offset)."""
    try:
        document = parse(raw, max_parsed_bytes=HEADER_PARSED_PER_BYTE * len(raw) + (1 << 20))
    except RefusedJson as error:
        raise _bad(display_path, f"its header cannot be parsed: {error.problem}") from error
    if not isinstance(document, dict):
        raise _bad(display_path, "its header is not a JSON object")
    metadata_raw = document.pop("__metadata__", None) or {}
    if not isinstance(metadata_raw, dict):
        raise _bad(display_path, "its __metadata__ is not an object")
    metadata = {str(k): v for k, v in metadata_raw.items() if isinstance(v, str)}
    data_size = file_size - data_start
    entries = []
    for name, spec in document.items():
        entry = _entry(name, spec, data_start, data_size)
        if entry is None:
            raise _bad(display_path, f"tensor {name[:100]!r} has a malformed header entry")
        entries.append(entry)
    _check_layout(entries, data_start, file_size, display_path)
    return SafetensorsHeader(metadata, entries)


def _check_layout(
    entries: list[HeaderEntry], data_start: int, file_size: int, display_path: str
) -> None:
    """Refuse entries that do not tile the data region: sorted by offset, each must start where
    the previous ended, the first at the data's start, the last at the file's end.

    The safetensors library refuses the same headers (Metadata::validate and read_metadata in
    safetensors/src/tensor.rs). Without this, 10,000 entries naming the same 16 MB would make
    the statistics scan read 160 GB from a 17 MB file; tiled entries read each byte once.
    """
    position = data_start
    # (start, end) like the library, so zero-byte tensors sort before the one sharing their start.
    for entry in sorted(entries, key=lambda e: (e.start, e.end)):
        if entry.start != position:
            relation = "overlaps the tensor before it" if entry.start < position else "leaves a gap"
            raise _bad(
                display_path,
                f"tensor {entry.name[:100]!r} {relation} (starts at data byte"
                f" {entry.start - data_start}, the bytes before it end at {position - data_start})",
            )
        position = entry.end
    if position != file_size:
        raise _bad(
            display_path,
            f"its tensors cover {position - data_start} of the {file_size - data_start} data bytes",
        )


def _entry(name: str, spec: Any, data_start: int, data_size: int) -> HeaderEntry | None:
    if not isinstance(spec, dict):
        return None
    dtype, shape, offsets = spec.get("dtype"), spec.get("shape"), spec.get("data_offsets")
    if dtype not in DTYPES or not isinstance(shape, list) or not isinstance(offsets, list):
        return None
    if len(shape) > MAX_DIMS or len(offsets) != 2 or not all(map(_is_count, [*shape, *offsets])):
        return None
    start, end = offsets
    if not start <= end <= data_size or end - start != math.prod(shape) * DTYPES[dtype][1]:
        return None  # the bytes must be exactly what the shape needs, inside the file
    return HeaderEntry(name, dtype, tuple(shape), data_start + start, data_start + end)


def _is_count(value: Any) -> bool:
    # `type() is int`: JSON gives plain ints (never bool, which is an int subclass); one test
    # instead of two isinstance calls, for headers of a million tensors.
    return type(value) is int and 0 <= value < (1 << 62)


def read_tensor(path: Path, entry: HeaderEntry, display_path: str) -> torch.Tensor:
    """One tensor: exactly its bytes, copied into a fresh CPU tensor (little-endian host)."""
    import torch

    dtype = getattr(torch, DTYPES[entry.dtype][0], None)
    if not isinstance(dtype, torch.dtype):
        raise UnreadableInput(display_path, f"tensor {entry.name}: dtype {entry.dtype} unsupported")
    with open_regular(path, display_path) as handle:
        if os.fstat(handle.fileno()).st_size < entry.end:
            raise UnreadableInput(display_path, f"cannot read tensor {entry.name} (file cut short)")
        handle.seek(entry.start)
        data = bytearray(handle.read(entry.end - entry.start))
    if len(data) != entry.end - entry.start:
        raise UnreadableInput(display_path, f"cannot read tensor {entry.name} (file cut short)")
    if not data:
        return torch.empty(entry.shape, dtype=dtype)
    return torch.frombuffer(data, dtype=dtype).reshape(entry.shape)


def _bad(display_path: str, problem: str) -> UnreadableInput:
    return UnreadableInput(display_path, f"not a readable safetensors file ({problem})")
