"""DCP `.metadata` as plain data, read at the pickle-opcode level: nothing in it is ever called.

`.metadata` is a pickled `torch.distributed.checkpoint.metadata.Metadata`. Unpickling it, even
with an allow-list of classes, hands the file every object the allow-list admits: BUILD on an
allowed *class* (`pathlib.PosixPath`) sets attributes on that class for the whole process, which
is how a 107-byte file once redirected tscope's own output paths. So the file is never
unpickled: `pickle_decoder.decode_pickle` walks the opcodes into inert records, and this module
reads the few fields tscope needs out of them into the frozen dataclasses below. Only globals DCP
writes are accepted; any other global refuses the file (it is data we would not understand).

What torch 2.x writes (torch/distributed/checkpoint/metadata.py and filesystem.py):
    Metadata(state_dict_metadata={fqn: TensorStorageMetadata | BytesStorageMetadata},
             planner_data=..., storage_data={MetadataIndex: _StorageInfo}, storage_meta=...)
    TensorStorageMetadata(properties=TensorProperties(dtype, ...), size=torch.Size,
                          chunks=[ChunkStorageMetadata(offsets=torch.Size, sizes=torch.Size)])
    TensorProperties pickles its state as a tuple (dtype, layout, requires_grad, enc, pin);
    MetadataIndex(fqn, offset=torch.Size | None, index); _StorageInfo(relative_path, offset,
    length, transform_descriptors=None). dtypes and torch.Size are GLOBALs (`torch.float32`).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache
from typing import Any

from tscope.ingest.checkpoints.pickle_decoder import (
    DecodeBudgetExceeded,
    ForeignGlobal,
    PickledObject,
    UndecodablePickle,
    decode_pickle,
)

_DCP = "torch.distributed.checkpoint.metadata."
_STORAGE_INFO = "torch.distributed.checkpoint.filesystem._StorageInfo"
ALLOWED_GLOBALS = frozenset(
    {
        *(
            _DCP + name
            for name in (
                "Metadata",
                "TensorStorageMetadata",
                "BytesStorageMetadata",
                "ChunkStorageMetadata",
                "TensorProperties",
                "StorageMeta",
                "MetadataIndex",
                "_MEM_FORMAT_ENCODING",
            )
        ),
        _STORAGE_INFO,
        "torch.Size",
        "torch.serialization._get_layout",
        "collections.OrderedDict",
        # StorageMeta.checkpoint_id: recorded as a name, never built (and never read).
        "pathlib.PosixPath",
        "pathlib.WindowsPath",
        "pathlib.PurePosixPath",
        "pathlib.PureWindowsPath",
    }
)
# A tensor shape a metadata file may declare: rank and each dimension bounded (a dimension past
# 2^48 elements is no tensor any machine holds, and keeps products far from overflow surprises).
MAX_DIMS = 16
MAX_DIM = 1 << 48
# What decoding may hold, per byte of `.metadata` (decode_pickle's charge: objects, references,
# container and memo growth). torch's own files charge 13x (9,000 one-chunk entries, 2.6 MB)
# to 17x (the same with 8 chunks each, 10.7 MB; each further chunk ~18x its 128 bytes), torch
# 2.13; a crafted file of 1-byte opcodes built ~75x (an empty dict is 64 bytes from `}`) and is
# now refused once it passes 32x, plus 1 MB for the fixed costs of a small file.
DECODED_BYTES_PER_FILE_BYTE = 32
DECODED_BYTES_FIXED = 1 << 20


class NotDcpMetadata(ValueError):
    """The pickle decodes but is not DCP metadata (or holds globals DCP never writes)."""

    def __init__(self, problem: str, foreign_global: str = "") -> None:
        super().__init__(problem)
        self.foreign_global = foreign_global


@dataclass(frozen=True)
class Chunk:
    """One saved piece of a tensor: where it starts in the full tensor and its shape."""

    offsets: tuple[int, ...]
    sizes: tuple[int, ...]


@dataclass(frozen=True)
class TensorEntry:
    dtype_name: str  # torch attribute name: "float32", "bfloat16"
    size: tuple[int, ...]
    chunks: tuple[Chunk, ...]


@dataclass(frozen=True)
class StorageRecord:
    """Where one chunk (or one bytes item) lies: a file relative to the folder, a byte range."""

    relative_path: str
    offset: int
    length: int
    transformed: bool  # transform_descriptors set: compressed or otherwise encoded


StorageKey = tuple[str, tuple[int, ...] | None]  # (fqn, chunk offsets; None for bytes items)


@dataclass
class DcpMetadata:
    tensors: dict[str, TensorEntry] = field(default_factory=dict)
    bytes_keys: list[str] = field(default_factory=list)
    storage: dict[StorageKey, StorageRecord] = field(default_factory=dict)
    damaged: list[str] = field(default_factory=list)  # entries without a usable shape/dtype


def parse_metadata(payload: bytes) -> DcpMetadata:
    """The plain metadata of a `.metadata` payload.

    Raises UndecodablePickle (not a pickle this decoder follows) or NotDcpMetadata.
    """
    # Every opcode is at least one byte, so the payload length bounds the decoding work; the
    # memory it holds is bounded by DECODED_BYTES_PER_FILE_BYTE, whatever the opcodes build.
    try:
        top = decode_pickle(
            payload,
            max_opcodes=len(payload) + 1,
            max_decoded_bytes=decoded_bytes_budget(len(payload)),
            admits_global=_dcp_global,
        )
    except ForeignGlobal as error:
        raise NotDcpMetadata(
            f"global {error.name} is not part of DCP metadata", error.name
        ) from None
    if not isinstance(top, PickledObject) or top.global_name != _DCP + "Metadata":
        raise NotDcpMetadata("the pickle is not a DCP Metadata object")
    state = _state_dict(top)
    entries = state.get("state_dict_metadata")
    storage = state.get("storage_data")
    if not isinstance(entries, dict):
        raise NotDcpMetadata("the metadata lists no entries (no state_dict_metadata)")
    if not isinstance(storage, dict):
        raise NotDcpMetadata("the metadata does not say where tensors are stored")
    metadata = DcpMetadata()
    for key, entry in entries.items():
        if not isinstance(key, str) or not isinstance(entry, PickledObject):
            continue
        if entry.global_name == _DCP + "BytesStorageMetadata":
            metadata.bytes_keys.append(key)
        elif entry.global_name == _DCP + "TensorStorageMetadata":
            tensor = _tensor_entry(entry)
            if tensor is None:
                metadata.damaged.append(key)
            else:
                metadata.tensors[key] = tensor
    for index, where in storage.items():
        storage_key = _storage_key(index)
        record = _storage_record(where)
        if storage_key is not None and record is not None:
            metadata.storage[storage_key] = record
    return metadata


def from_unpickled(metadata: Any) -> DcpMetadata:
    """The same plain data from a Metadata that torch itself unpickled (--trust-pickle)."""
    plain = DcpMetadata()
    for key, entry in dict(getattr(metadata, "state_dict_metadata", {}) or {}).items():
        kind = type(entry).__name__
        if kind == "BytesStorageMetadata":
            plain.bytes_keys.append(str(key))
        elif kind == "TensorStorageMetadata":
            dtype = str(getattr(entry.properties, "dtype", "")).removeprefix("torch.")
            chunks = tuple(
                Chunk(_dims(tuple(c.offsets)) or (), _dims(tuple(c.sizes)) or ())
                for c in entry.chunks
            )
            size = _dims(tuple(entry.size))
            if size is None or not dtype:
                plain.damaged.append(str(key))
            else:
                plain.tensors[str(key)] = TensorEntry(dtype, size, chunks)
    for index, where in dict(getattr(metadata, "storage_data", {}) or {}).items():
        offset = getattr(index, "offset", None)
        storage_key = (str(index.fqn), None if offset is None else tuple(int(d) for d in offset))
        plain.storage[storage_key] = StorageRecord(
            str(where.relative_path),
            int(where.offset),
            int(where.length),
            bool(getattr(where, "transform_descriptors", None)),
        )
    return plain


# --- reading the records -----------------------------------------------------------------------


def decoded_bytes_budget(file_bytes: int) -> int:
    """What decoding a `.metadata` of `file_bytes` may hold (decode_pickle's max_decoded_bytes)."""
    return DECODED_BYTES_PER_FILE_BYTE * file_bytes + DECODED_BYTES_FIXED


def _dcp_global(name: str) -> bool:
    """A global DCP writes: its metadata classes, torch.Size, dtypes, layouts, memory formats."""
    return name in ALLOWED_GLOBALS or name in _torch_type_globals()


def _state_dict(record: PickledObject) -> dict[Any, Any]:
    state = record.state
    if isinstance(state, tuple) and len(state) == 2:  # (dict state, slot state)
        merged: dict[Any, Any] = {}
        for part in state:
            if isinstance(part, dict):
                merged.update(part)
        return merged
    return state if isinstance(state, dict) else {}


def _tensor_entry(entry: PickledObject) -> TensorEntry | None:
    state = _state_dict(entry)
    dtype = _dtype_name(state.get("properties"))
    size = _size(state.get("size"))
    chunks_raw = state.get("chunks")
    if dtype is None or size is None or not isinstance(chunks_raw, list):
        return None
    chunks = []
    # A chunk repeated by memo references (4 bytes each) is one object: converted once, so a
    # list of 300,000 copies costs lookups, not conversions. The copies stay in the list for
    # dcp_chunks to refuse the tensor with its reason (chunks that overlap).
    converted: dict[int, Chunk] = {}
    for raw in chunks_raw:
        chunk = converted.get(id(raw))
        if chunk is None:
            if (
                not isinstance(raw, PickledObject)
                or raw.global_name != _DCP + "ChunkStorageMetadata"
            ):
                return None
            chunk_state = _state_dict(raw)
            offsets, sizes = _size(chunk_state.get("offsets")), _size(chunk_state.get("sizes"))
            if offsets is None or sizes is None:
                return None
            chunk = converted[id(raw)] = Chunk(offsets, sizes)
        chunks.append(chunk)
    return TensorEntry(dtype, size, tuple(chunks))


def _dtype_name(properties: Any) -> str | None:
    if not isinstance(properties, PickledObject):
        return None
    state = properties.state
    if isinstance(state, tuple) and state:  # TensorProperties.__getstate__ (torch >= 2.0)
        dtype = state[0]
    elif isinstance(state, dict):  # older torch pickled the dataclass __dict__
        dtype = state.get("dtype")
    else:
        return None
    if isinstance(dtype, PickledObject) and dtype.global_name in _torch_dtype_globals():
        return dtype.global_name.removeprefix("torch.")
    return None


@cache
def _torch_dtype_globals() -> frozenset[str]:
    """`torch.float32`, `torch.bfloat16`, ...: the names under which dtypes are pickled."""
    import torch

    return frozenset(
        f"torch.{name}" for name in dir(torch) if isinstance(getattr(torch, name), torch.dtype)
    )


@cache
def _torch_type_globals() -> frozenset[str]:
    """dtypes plus the layouts and memory formats TensorProperties may reference."""
    import torch

    others = (torch.layout, torch.memory_format)
    return _torch_dtype_globals() | frozenset(
        f"torch.{name}" for name in dir(torch) if isinstance(getattr(torch, name), others)
    )


def _size(value: Any) -> tuple[int, ...] | None:
    """A torch.Size record (`torch.Size((3, 4))`) or a plain tuple/list of ints."""
    if isinstance(value, PickledObject):
        if value.global_name != "torch.Size" or len(value.args) != 1:
            return None
        value = value.args[0]
    if not isinstance(value, (tuple, list)):
        return None
    return _dims(tuple(value))


def _dims(value: tuple[Any, ...]) -> tuple[int, ...] | None:
    if len(value) > MAX_DIMS:
        return None
    dims = []
    for dim in value:
        if isinstance(dim, bool) or not isinstance(dim, int) or not 0 <= dim <= MAX_DIM:
            return None
        dims.append(dim)
    return tuple(dims)


def _storage_key(index: Any) -> StorageKey | None:
    if not isinstance(index, PickledObject) or index.global_name != _DCP + "MetadataIndex":
        return None
    state = _state_dict(index)
    fqn = state.get("fqn")
    if not isinstance(fqn, str):
        return None
    offset = state.get("offset")
    if offset is None:
        return fqn, None
    dims = _size(offset)
    return None if dims is None else (fqn, dims)


def _storage_record(where: Any) -> StorageRecord | None:
    if not isinstance(where, PickledObject) or where.global_name != _STORAGE_INFO:
        return None
    state = _state_dict(where)
    path = state.get("relative_path")
    offset, length = _count(state.get("offset")), _count(state.get("length"))
    if not isinstance(path, str) or offset is None or length is None:
        return None
    return StorageRecord(path, offset, length, bool(state.get("transform_descriptors")))


def _count(value: Any) -> int | None:
    """A byte offset or length: a non-negative int below 2^62 (no file is larger)."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value < (1 << 62):
        return value
    return None


__all__ = [
    "Chunk",
    "DcpMetadata",
    "DecodeBudgetExceeded",
    "NotDcpMetadata",
    "StorageRecord",
    "TensorEntry",
    "UndecodablePickle",
    "from_unpickled",
    "parse_metadata",
]
