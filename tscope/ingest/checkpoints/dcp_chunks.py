"""The checks a DCP tensor's storage records pass before any of their bytes is read.

`.metadata` is a stranger's description of the shard files: where each chunk of each tensor is
stored and how large it is. Before dcp_storage reads a record, the record must name a file
inside the folder (no `..`, no absolute path), the tensor's declared size must be backed by
record bytes actually present in the shards, no two records of one tensor may share bytes, and
the chunks must lie inside the tensor and tile it without overlap, so a 100-byte file cannot ask
for 64 GiB nor a memoized chunk list for a torch.load per copy. Kept apart from dcp_storage.py,
which reads and assembles what these checks passed: this module reads no record, only the
metadata and the shard files' sizes.
"""

from __future__ import annotations

import math
import os
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.dcp_metadata import Chunk, DcpMetadata, StorageKey, StorageRecord
from tscope.ingest.safe_fs import OUTSIDE_INPUT, UNUSABLE_PATH, file_identity, is_inside

if TYPE_CHECKING:
    from typing import Any

BACKED_ONLY = "tscope allocates only what the files back"


def record_path(folder: Path, record: StorageRecord, display_path: str, what: str) -> Path:
    """The shard file a record names, refused unless it is a relative path inside the folder."""
    relative = PurePosixPath(record.relative_path)
    escapes = relative.is_absolute() or ".." in relative.parts or not relative.parts
    candidate = folder / relative
    if escapes or not is_inside(folder, candidate):
        raise UnreadableInput(
            display_path, f"{what} is stored in {record.relative_path!r}, {OUTSIDE_INPUT}"
        )
    return candidate


def chunk_records(
    folder: Path, metadata: DcpMetadata, key: str, display_path: str
) -> list[tuple[Any, StorageRecord]]:
    """Each non-empty chunk with its storage record, after checking that the file can back the
    tensor and that the chunks tile it.

    The budget: the tensor's bytes (numel x element size) must not exceed the bytes its chunk
    records occupy on disk (a torch.save record holds its storage plus a header, so a real chunk
    always passes), every chunk must lie inside the tensor, and the chunks must not overlap
    (`_check_tiling`), so a tensor is never loaded from more chunks than it has elements.
    Chunks with no element (an empty shard of an uneven split) need no read and are left out.
    """
    import torch

    entry = metadata.tensors[key]
    # The dtype's own size: allocating one element of complex32 printed torch's warning.
    element = getattr(torch, entry.dtype_name).itemsize
    numel = math.prod(entry.size)
    records = []
    volume = 0
    for chunk in entry.chunks:
        inside = len(chunk.offsets) == len(entry.size) == len(chunk.sizes) and all(
            start + length <= dim
            for start, length, dim in zip(chunk.offsets, chunk.sizes, entry.size, strict=True)
        )
        if not inside:
            raise UnreadableInput(display_path, f"tensor {key}: a chunk lies outside the tensor")
        # Checked as the list is walked: a chunk list repeated N times by memo references
        # (4 bytes a copy) is refused after one pass over the tensor's elements, before any
        # load; it once ran torch.load per copy (300,000 copies in a 1.2 MB file: over a minute).
        volume += math.prod(chunk.sizes)
        if volume > numel:
            raise UnreadableInput(
                display_path,
                f"tensor {key} cannot be read: its {len(entry.chunks)} chunks hold more elements "
                f"than its shape {list(entry.size)} ({numel}); the chunk list repeats or overlaps",
            )
        record = metadata.storage.get((key, chunk.offsets))
        if record is None:
            raise UnreadableInput(display_path, f"tensor {key}: a chunk has no storage record")
        if math.prod(chunk.sizes) * element > record.length:
            raise UnreadableInput(
                display_path,
                f"tensor {key} cannot be read: a chunk declares {math.prod(chunk.sizes) * element}"
                f" bytes but its record holds {record.length}; {BACKED_ONLY}",
            )
        if math.prod(chunk.sizes):
            records.append((chunk, record))
    held = _backed_bytes(folder, [record for _, record in records], display_path, key)
    wanted = numel * element
    if wanted > held:
        raise UnreadableInput(
            display_path,
            f"tensor {key} cannot be read: it declares shape {list(entry.size)} ({wanted} bytes) "
            f"but its records "
            f"hold {held} bytes; {BACKED_ONLY}",
        )
    # After the budget: the tiling grid has at most one cell per element, now backed by bytes.
    _check_tiling(entry.size, entry.chunks, key, display_path)
    return records


def _check_tiling(
    size: tuple[int, ...], chunks: tuple[Chunk, ...], key: str, display_path: str
) -> None:
    """Refuse chunks that repeat an offset or overlap: torch's planner writes each region of a
    tensor once (dedup_save_plans keys write items by offset), so only a crafted file has them.

    Exact and without comparing pairs: the chunks' start and end offsets, sorted per dimension,
    cut the tensor into a grid of cells (at most one per element, one per chunk for the grids
    FSDP and tensor parallelism write); each chunk marks its cells, and a cell marked twice is
    an overlap. The caller has already bounded the chunks' total elements by the tensor's.
    """
    import torch

    seen_empty: set[tuple[int, ...]] = set()
    filled = []
    for chunk in chunks:
        if math.prod(chunk.sizes):
            filled.append(chunk)
        elif chunk.offsets in seen_empty:  # an empty chunk covers nothing, but once only
            raise UnreadableInput(display_path, f"tensor {key}: two chunks share an offset")
        else:
            seen_empty.add(chunk.offsets)
    if len(filled) < 2:
        return
    cuts = [
        sorted({c.offsets[d] for c in filled} | {c.offsets[d] + c.sizes[d] for c in filled})
        for d in range(len(size))
    ]
    cell = [{cut: i for i, cut in enumerate(dim_cuts)} for dim_cuts in cuts]
    grid = torch.zeros([len(dim_cuts) - 1 for dim_cuts in cuts], dtype=torch.bool)
    for chunk in filled:
        view = grid
        for dim, (start, length) in enumerate(zip(chunk.offsets, chunk.sizes, strict=True)):
            first = cell[dim][start]
            view = view.narrow(dim, first, cell[dim][start + length] - first)
        if bool(view.any()):
            raise UnreadableInput(
                display_path,
                f"tensor {key} cannot be read: its chunks overlap (a region is stored twice); "
                "torch writes each region once",
            )
        view.fill_(True)


def drop_shared_records(folder: Path, metadata: DcpMetadata) -> int:
    """Remove from `metadata.storage` every record whose bytes overlap an earlier record's in the
    same file (the same device and inode, however .metadata spells its name); returns how many.

    torch writes each item (a tensor chunk, a bytes value) to its own bytes. Records that share
    them make one read from disk cost one load per record: a crafted .metadata pointed 1,000
    tensors at one 16 MB record (98 s, red team round 8), or group settings at one 9 MB list
    (5.8 s a load). The entries whose record is dropped then fail as having none."""
    by_file: dict[tuple[int, int], list[tuple[int, int, StorageKey]]] = {}
    files: dict[str, tuple[int, int] | None] = {}  # one lookup per name (FSDP: many records a file)
    for storage_key, record in metadata.storage.items():
        if record.length <= 0:
            continue  # an empty item shares no byte
        if record.relative_path not in files:
            files[record.relative_path] = _identity(folder, record)
        identity = files[record.relative_path]
        if identity is not None:
            by_file.setdefault(identity, []).append(
                (record.offset, record.offset + record.length, storage_key)
            )
    dropped = 0
    for ranges in by_file.values():
        end_of_previous = 0
        for start, end, storage_key in sorted(ranges):
            if start < end_of_previous:
                del metadata.storage[storage_key]
                dropped += 1
            else:
                end_of_previous = end
    return dropped


def _identity(folder: Path, record: StorageRecord) -> tuple[int, int] | None:
    """The (device, inode) of the file a record names inside the folder; None when it is
    refused or missing (reading the record reports it)."""
    try:
        return file_identity(record_path(folder, record, "", ""))
    except UnreadableInput:
        return None


def _backed_bytes(folder: Path, records: list[StorageRecord], display_path: str, key: str) -> int:
    """Bytes of the shard files the records cover. Records of one tensor that share bytes are
    refused: torch writes each chunk to its own bytes, and a crafted file pointing many chunks
    at one record would run torch.load once per chunk on bytes read once from disk."""
    # Keyed by the file itself (device and inode), not by the name .metadata spells: "x",
    # "./x" and "././x" (or two hard links inside the folder) are one file, and a crafted
    # metadata once spelled one 16 MB record 256 ways for a 4 GB tensor (red team round 8).
    by_file: dict[tuple[int, int], tuple[str, int, list[tuple[int, int]]]] = {}
    for record in records:
        path = record_path(folder, record, display_path, f"tensor {key}")  # refused if outside
        try:
            stat = os.stat(path)
        except UNUSABLE_PATH:
            continue  # missing: reading the chunk reports it
        entry = by_file.setdefault(
            (stat.st_dev, stat.st_ino), (record.relative_path, stat.st_size, [])
        )
        entry[2].append((record.offset, record.offset + record.length))
    held = 0
    for relative, size, ranges in by_file.values():
        end_of_previous = 0
        for start, end in sorted(ranges):
            if start < end_of_previous:
                raise UnreadableInput(
                    display_path,
                    f"tensor {key} cannot be read: two of its chunk records share bytes of "
                    f"{relative[:120]!r}; torch writes each chunk to its own bytes",
                )
            end_of_previous = end
            held += max(min(end, size) - start, 0)
    return held
