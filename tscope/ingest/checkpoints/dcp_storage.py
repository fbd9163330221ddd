"""Reading a torch distributed checkpoint folder without running its pickles, in one process.

A DCP folder is `.metadata` (a pickled `Metadata`) plus data files `__{rank}_{i}.distcp`.
torch's own `FileSystemReader.read_metadata` calls plain `pickle.load` on `.metadata` (torch
2.13, distributed/checkpoint/filesystem.py), so a planted `__reduce__` would run on open; even a
restricted unpickler lets BUILD reach an allowed class. The file is therefore never unpickled
without --trust-pickle: `dcp_metadata.parse_metadata` reads it at the opcode level into plain data.

Tensors are then assembled here, as torch's FileSystemReader.read_data does for a full load: each
chunk record is a `torch.save`d tensor at (offset, length) in a shard file, read with
`torch.load(weights_only=True)` and copied into the chunk's place. Doing it ourselves lets every
record be checked first: the shard must be a regular file inside the folder (no `..`, no
absolute path, no link), the byte range must lie in the file, and the tensor's declared size must
be backed by record bytes actually present, so a 100-byte file cannot ask for 64 GiB (those
checks on the metadata's records and chunks live in dcp_chunks.py). Non-tensor entries ("bytes"
items: param-group hyper-parameters, a saved step) are torch.save'd objects read through
`safe_torch_load`.
"""

from __future__ import annotations

import io
import math
import os
import pickle
from pathlib import Path
from typing import TYPE_CHECKING

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.dcp_chunks import chunk_records, record_path
from tscope.ingest.checkpoints.dcp_metadata import (
    DECODED_BYTES_PER_FILE_BYTE,
    DcpMetadata,
    DecodeBudgetExceeded,
    NotDcpMetadata,
    StorageRecord,
    UndecodablePickle,
    from_unpickled,
    parse_metadata,
)
from tscope.ingest.checkpoints.safe_load import (
    TRUST_HINT,
    safe_torch_loads,
    warn_trusted_unpickling,
)
from tscope.ingest.safe_fs import SYMLINK_REFUSED, is_real_folder, open_regular, read_bytes_bounded

if TYPE_CHECKING:
    from typing import Any, BinaryIO

    import torch

METADATA_FILE = ".metadata"
# A metadata file lists every chunk of every tensor (~150 bytes each): 64 MiB is ~400k chunks,
# beyond the largest public FSDP checkpoints; decoding holds at most 32x the file in memory
# (dcp_metadata.DECODED_BYTES_PER_FILE_BYTE), torch's own files 11-15x (peak RSS, 2.6-10.7 MB).
MAX_METADATA_BYTES = 64 * 1024 * 1024
# A bytes item is a small torch.save'd value (a learning rate, a step, a list of names).
MAX_BYTES_ITEM = 64 * 1024 * 1024
# ...and one param group setting (a learning rate, a pair of betas) is a few hundred bytes: a
# crafted group's 18 MB list of NaN took ~0.9 GB to load (red team round 8).
MAX_SETTING_ITEM = 64 * 1024


def read_metadata(folder: Path, display_path: str, options: LoadOptions) -> DcpMetadata:
    """The folder's metadata as plain data, decoded without running anything from the file."""
    if not is_real_folder(folder):  # its shards would be read through the link
        raise UnreadableInput(display_path, SYMLINK_REFUSED)
    shown = f"{display_path}/{METADATA_FILE}"
    payload = read_bytes_bounded(folder / METADATA_FILE, shown, MAX_METADATA_BYTES)
    return metadata_from_bytes(payload, shown, options)


def metadata_from_bytes(payload: bytes, shown: str, options: LoadOptions) -> DcpMetadata:
    """parse_metadata with every failure turned into UnreadableInput naming `shown`."""
    try:
        return parse_metadata(payload)
    except NotDcpMetadata as error:
        if not error.foreign_global:
            raise UnreadableInput(shown, str(error)) from error
        if not options.trust_pickle:
            raise UnreadableInput(
                shown, f"it holds pickled objects outside the safe set ({error})", TRUST_HINT
            ) from error
    except DecodeBudgetExceeded as error:
        if not options.trust_pickle:
            raise UnreadableInput(
                shown,
                f"it describes more objects than a metadata file of its size holds ({error}, "
                f"{DECODED_BYTES_PER_FILE_BYTE}x its size; torch's own need 13-18x)",
                TRUST_HINT,
            ) from error
    except UndecodablePickle as error:
        reason = str(error) or type(error).__name__
        raise UnreadableInput(shown, f"not a readable DCP metadata file ({reason})") from error
    return _trusted_metadata(payload, shown)


def _trusted_metadata(payload: bytes, shown: str) -> DcpMetadata:
    """--trust-pickle: a Metadata with globals we do not know, unpickled by pickle itself."""
    warn_trusted_unpickling(shown)
    try:
        return from_unpickled(pickle.loads(payload))
    except Exception as error:  # the trusted file is still a stranger's: explain its failure
        text = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        raise UnreadableInput(
            shown, f"not a readable DCP metadata file ({text or type(error).__name__})"
        ) from error


def _read_record(
    folder: Path, record: StorageRecord, display_path: str, what: str, limit: int | None = None
) -> bytes:
    if record.transformed:
        # Compressed or otherwise transformed records need torch's extension registry.
        raise UnreadableInput(display_path, f"{what} is stored transformed; not supported")
    path = record_path(folder, record, display_path, what)
    with open_regular(path, f"{display_path}/{record.relative_path}") as handle:
        size = os.fstat(handle.fileno()).st_size
        if record.offset + record.length > size:
            raise UnreadableInput(
                display_path, f"{what} cannot be read (cut short: truncated data file)"
            )
        if limit is not None and record.length > limit:
            raise UnreadableInput(
                display_path, f"{what} is {record.length} bytes, more than tscope reads ({limit})"
            )
        handle.seek(record.offset)
        return _read_exactly(handle, record.length)


def _read_exactly(handle: BinaryIO, length: int) -> bytes:
    data = handle.read(length)
    return data if len(data) == length else b""


def load_tensor(folder: Path, metadata: DcpMetadata, key: str, display_path: str) -> torch.Tensor:
    """One tensor entry, assembled from its chunks (all ranks' shards) into a fresh CPU tensor."""
    import torch

    entry = metadata.tensors[key]
    dtype = _declared_dtype(entry.dtype_name, key, display_path)
    records = chunk_records(folder, metadata, key, display_path)
    target = torch.zeros(entry.size, dtype=dtype)
    for chunk, record in records:
        loaded = _chunk_tensor(folder, record, chunk, dtype, key, display_path)
        view = target
        for dim, (start, length) in enumerate(zip(chunk.offsets, chunk.sizes, strict=True)):
            view = view.narrow(dim, start, length)
        view.copy_(loaded)
    return target


def load_tensor_region(
    folder: Path,
    metadata: DcpMetadata,
    key: str,
    offsets: tuple[int, ...],
    sizes: tuple[int, ...],
    display_path: str,
) -> torch.Tensor:
    """The part of a tensor entry at `offsets` with shape `sizes` (one rank's shard of a sharded
    model), read from only the chunk records that overlap it; every record is vetted as for
    load_tensor. Raises UnreadableInput when the chunks do not cover the whole region."""
    import torch

    entry = metadata.tensors[key]
    dtype = _declared_dtype(entry.dtype_name, key, display_path)
    if len(offsets) != len(entry.size) or any(
        start < 0 or start + length > dim
        for start, length, dim in zip(offsets, sizes, entry.size, strict=True)
    ):
        raise UnreadableInput(
            display_path,
            f"tensor {key} has shape {list(entry.size)}; the model's shard at {list(offsets)} of "
            f"size {list(sizes)} lies outside it (a checkpoint of another model?)",
        )
    target = torch.zeros(sizes, dtype=dtype)
    if math.prod(sizes) == 0:  # an uneven split can leave a rank an empty shard
        return target
    covered = 0
    for chunk, record in chunk_records(folder, metadata, key, display_path):
        overlap = [
            (max(start, c_start), min(start + length, c_start + c_length))
            for start, length, c_start, c_length in zip(
                offsets, sizes, chunk.offsets, chunk.sizes, strict=True
            )
        ]
        if any(low >= high for low, high in overlap):
            continue
        loaded = _chunk_tensor(folder, record, chunk, dtype, key, display_path)
        source, view = loaded, target
        for dim, (low, high) in enumerate(overlap):
            source = source.narrow(dim, low - chunk.offsets[dim], high - low)
            view = view.narrow(dim, low - offsets[dim], high - low)
        view.copy_(source)
        covered += math.prod(high - low for low, high in overlap)
    if covered < math.prod(sizes):
        raise UnreadableInput(
            display_path, f"tensor {key}: the saved chunks do not cover the model's shard"
        )
    return target


# The dtypes torch's DCP writes for training state and tscope computes statistics of (complex
# ones are read and then skipped with a note). The others torch can name but not copy or reduce
# (qint8, bits8, uint1-7, ...): a .metadata declaring one ended in a NotImplementedError traceback.
READABLE_DTYPES = frozenset(
    {
        "float64", "float32", "float16", "bfloat16",
        "float8_e4m3fn", "float8_e4m3fnuz", "float8_e5m2", "float8_e5m2fnuz", "float8_e8m0fnu",
        "int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64", "bool",
        "complex64", "complex128",
    }
)  # fmt: skip


def _declared_dtype(name: str, key: str, display_path: str) -> torch.dtype:
    import torch

    dtype = getattr(torch, name, None)
    if not isinstance(dtype, torch.dtype):
        raise UnreadableInput(display_path, f"tensor {key} has an unknown dtype {name}")
    if name not in READABLE_DTYPES:
        raise UnreadableInput(
            display_path, f"tensor {key} has dtype {name}, which tscope does not read"
        )
    return dtype


def _chunk_tensor(
    folder: Path,
    record: StorageRecord,
    chunk: Any,
    dtype: torch.dtype,
    key: str,
    display_path: str,
) -> torch.Tensor:
    import torch

    payload = _read_record(folder, record, display_path, f"tensor {key}")
    if len(payload) != record.length:
        raise UnreadableInput(display_path, f"tensor {key} is cut short (truncated data file)")
    try:
        loaded = torch.load(io.BytesIO(payload), map_location="cpu", weights_only=True)
    except Exception as error:  # a damaged record: explain, never a traceback
        raise UnreadableInput(
            display_path, f"tensor {key} cannot be read ({_first_line(error)})"
        ) from error
    if not isinstance(loaded, torch.Tensor) or tuple(loaded.shape) != chunk.sizes:
        raise UnreadableInput(
            display_path, f"tensor {key} cannot be read (a chunk record has the wrong shape)"
        )
    if loaded.dtype != dtype:  # torch writes each chunk in the dtype .metadata declares
        raise UnreadableInput(
            display_path,
            f"tensor {key} cannot be read: .metadata declares {dtype} but a chunk record holds "
            f"{loaded.dtype}",
        )
    return loaded


def load_bytes_item(
    folder: Path,
    metadata: DcpMetadata,
    key: str,
    display_path: str,
    options: LoadOptions,
    limit: int = MAX_BYTES_ITEM,
) -> Any:
    """A non-tensor entry (a torch.save'd Python value of at most `limit` bytes), through
    safe_torch_load."""
    record = metadata.storage.get((key, None))
    if record is None:
        raise UnreadableInput(display_path, f"entry {key} has no storage record")
    payload = _read_record(folder, record, display_path, f"entry {key}", limit)
    if len(payload) != record.length:
        raise UnreadableInput(display_path, f"entry {key} is cut short (truncated data file)")
    # Loaded from memory: nothing of the input is ever written anywhere.
    return safe_torch_loads(payload, f"{display_path} (entry {key})", options)


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    name = type(error).__name__
    return f"{name}: {text.splitlines()[0][:200]}" if text else name
