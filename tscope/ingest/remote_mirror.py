"""A remote run mirrored into a private local cache, fetching only what the analysis reads; the
normal local pipeline (every reader, every safety rule) then runs on the mirror.

What is fetched, per listed object (names checked by remote_source.safe_relative_parts):

- `*.safetensors` (larger than a Git LFS pointer can be): the 8-byte length and the header by range requests, then (when
  weights are read) only the byte ranges of the tensors that get statistics
  (state_dict_files.holds_statistics: float parameters, not buffers), ranges closer than
  MERGE_GAP_BYTES merged into one request. The local copy is a sparse file of the object's full
  size: the header and those tensors at their offsets, zeros elsewhere, never read.
- checkpoint files other readers open as a whole (`.pt`, `.bin`, `.ckpt`, `.distcp`, `.json`, …)
  and anything up to SNIFF_BYTES: whole.
- anything else (a 5 GB `train.jsonl`, a tokenizer, images): its first SNIFF_BYTES; whole only
  if a log reader's `can_read` claims it from them (the readers sniff at most 64 KiB), else left
  out (discovery would have listed it as of unknown format and read nothing of it).

The cache lives in TSCOPE_CACHE_DIR (default $XDG_CACHE_HOME/tscope, ~/.cache/tscope), folder
`remote/<sha256 of the URL>`, created 0700, written only through tscope.output_files. A file is
reused when the store reports the same size and version (ETag, generation) and the cached copy
holds every range now needed; files no longer listed are removed from the mirror.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import struct
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tscope.errors import UnreadableInput, UsageError
from tscope.ingest.checkpoints.safetensors_header import MAX_HEADER_BYTES, parse_header
from tscope.ingest.checkpoints.state_dict_files import holds_statistics
from tscope.ingest.discover import SKIPPED_DIRS
from tscope.ingest.lfs_pointer import MAX_POINTER_BYTES
from tscope.ingest.remote_source import (
    RemoteFile,
    RemoteListing,
    list_run,
    safe_relative_parts,
    unavailable,
    url_name,
)
from tscope.ingest.safe_fs import is_regular_file
from tscope.model import PartialInput
from tscope.output_files import make_subfolder, replacing, write_text
from tscope.user_cache import cache_home

# The readers' sniffing window (text_logs.SNIFF_BYTES, table_columns.SNIFF_BYTES: 64 KiB).
SNIFF_BYTES = 64 * 1024
# Objects read whole by the checkpoint readers (or as run configuration) whatever their size.
WHOLE_SUFFIXES = (".pt", ".pth", ".bin", ".ckpt", ".distcp", ".json", ".yaml", ".yml", ".pkl")
WHOLE_NAMES = (".metadata", "latest")  # DCP's index; DeepSpeed's pointer to the last tag
# Tensors separated by less than this (buffers, alignment) are fetched in one request: at most
# 64 KiB over-read per gap against one round trip saved.
MERGE_GAP_BYTES = 64 * 1024
# One request reads at most this much, so memory stays bounded on a 10 GB object.
CHUNK_BYTES = 64 * 1024 * 1024
MANIFEST = "manifest.json"
MANIFEST_MAX_BYTES = 256 * 1024 * 1024
_FOLDER_MODE = 0o700


@dataclass
class MirrorStats:
    listed_files: int = 0
    listed_bytes: int = 0  # the sizes of every listed object
    fetched_bytes: int = 0  # bytes transferred by this run (cache hits transfer nothing)
    requests: int = 0
    whole_files: int = 0
    ranged_files: int = 0  # safetensors read by header and tensor ranges
    left_out_files: int = 0  # no reader claims them: not fetched beyond their first bytes
    reused_files: int = 0


@dataclass
class Mirror:
    url: str
    root: Path  # what the local pipeline analyzes: the mirror folder, or the one mirrored file
    cache: Path
    partial: list[PartialInput] = field(default_factory=list)
    stats: MirrorStats = field(default_factory=MirrorStats)


Ranges = list[tuple[int, int]]  # [start, end) byte ranges, sorted, disjoint


def mirror_run(
    url: str,
    read_weights: bool = True,
    on_file: Callable[[str], None] | None = None,
    cache_dir: Path | None = None,
    storage_options: dict[str, Any] | None = None,
) -> Mirror:
    """List `url`, fetch what the analysis needs into the cache, return the local root to read."""
    filesystem, listing = list_run(url, storage_options)
    cache = _cache_folder(cache_dir or cache_home(), url)
    name_parts, problem = safe_relative_parts(url_name(url))
    tree_name = name_parts[0] if problem is None and len(name_parts) == 1 else "remote"
    tree = make_subfolder(cache, "object" if listing.is_file else tree_name)
    mirror = Mirror(url, tree, cache)
    mirror.partial = [PartialInput(name, why) for name, why in listing.refused]
    fetcher = _Fetcher(filesystem, listing, mirror.stats)
    manifest = _load_manifest(cache, url)
    kept: dict[str, dict[str, Any]] = {}
    for remote in listing.files:
        mirror.stats.listed_files += 1
        mirror.stats.listed_bytes += remote.size
        if any(part in SKIPPED_DIRS for part in remote.parts[:-1]):
            continue  # discovery never enters .git, __pycache__, node_modules
        if on_file is not None:
            on_file(f"fetching {remote.display}")
        try:
            entry = _mirror_file(fetcher, remote, tree, read_weights, manifest.get(remote.display))
        except UnreadableInput as error:
            mirror.partial.append(PartialInput(error.path, error.problem))
            continue
        if entry is not None:
            kept[remote.display] = entry
    _remove_stale(tree, kept)
    write_text(cache / MANIFEST, json.dumps({"url": url, "files": kept}, sort_keys=True))
    if listing.is_file:
        mirror.root = tree / listing.files[0].parts[-1] if listing.files else tree
    return mirror


def _cache_folder(home: Path, url: str) -> Path:
    key = hashlib.sha256(url.rstrip("/").encode("utf-8")).hexdigest()[:24]
    home.mkdir(parents=True, exist_ok=True, mode=_FOLDER_MODE)
    folder = make_subfolder(home, "remote", key)
    os.chmod(folder, _FOLDER_MODE)  # the run's files are the user's; other accounts see none
    return folder


def _load_manifest(cache: Path, url: str) -> dict[str, dict[str, Any]]:
    from tscope.ingest import safe_json

    path = cache / MANIFEST
    if not is_regular_file(path):
        return {}
    try:
        document = safe_json.load_file(path, MANIFEST, MANIFEST_MAX_BYTES)
    except UnreadableInput:
        return {}
    if not isinstance(document, dict) or document.get("url") != url:
        return {}
    files = document.get("files")
    return files if isinstance(files, dict) else {}


class _Fetcher:
    """Range reads of one listing's objects, each counted in the stats."""

    def __init__(self, filesystem: Any, listing: RemoteListing, stats: MirrorStats) -> None:
        self._filesystem, self._listing, self.stats = filesystem, listing, stats

    def read(self, remote: RemoteFile, start: int, end: int) -> bytes:
        location = (
            self._listing.root
            if self._listing.is_file
            else f"{self._listing.root}/{'/'.join(remote.parts)}"
        )
        try:
            data = bytes(self._filesystem.cat_file(location, start=start, end=end))
        except Exception as error:
            raise unavailable(self._listing.url, error) from None
        self.stats.requests += 1
        self.stats.fetched_bytes += len(data)
        if len(data) != end - start:
            raise UnreadableInput(
                remote.display,
                f"the store returned {len(data)} bytes for bytes {start}-{end} (the object changed "
                "while it was read?); run tscope again",
            )
        return data


def _mirror_file(
    fetcher: _Fetcher,
    remote: RemoteFile,
    tree: Path,
    read_weights: bool,
    cached: dict[str, Any] | None,
) -> dict[str, Any] | None:
    """Fetch one object's needed ranges into the mirror; its manifest entry, or None when no
    reader would read it (nothing of it stays in the mirror)."""
    folder = make_subfolder(tree, *remote.parts[:-1])
    target = folder / remote.parts[-1]
    version = {"size": remote.size, "version": remote.version}
    reusable = (
        cached is not None
        and remote.version is not None
        and all(cached.get(key) == value for key, value in version.items())
    )
    name = remote.parts[-1]
    if remote.size > MAX_POINTER_BYTES and name.endswith(".safetensors"):
        if reusable and cached is not None and cached.get("header") is not None:
            needed = _needed_ranges(cached["header"], read_weights)
            if _covers(cached.get("ranges"), needed) and _same_size(target, remote.size):
                fetcher.stats.reused_files += 1
                return cached
        return _fetch_safetensors(fetcher, remote, target, read_weights, version)
    whole = remote.size <= SNIFF_BYTES or name.endswith(WHOLE_SUFFIXES) or name in WHOLE_NAMES
    if reusable and cached is not None:
        if cached.get("left_out") and not whole:
            fetcher.stats.left_out_files += 1
            return cached
        if _covers(cached.get("ranges"), [(0, remote.size)]) and _same_size(target, remote.size):
            fetcher.stats.reused_files += 1
            return cached
    if whole:
        _write_ranges(target, remote.size, _fetch(fetcher, remote, [(0, remote.size)]))
        fetcher.stats.whole_files += 1
        return {**version, "ranges": [[0, remote.size]]}
    return _sniff_then_fetch(fetcher, remote, target, version)


def _sniff_then_fetch(
    fetcher: _Fetcher, remote: RemoteFile, target: Path, version: dict[str, Any]
) -> dict[str, Any]:
    """The first SNIFF_BYTES under the object's own name, shown to the log readers; the rest only
    when one claims it."""
    from tscope.ingest.registry import READERS

    head = fetcher.read(remote, 0, SNIFF_BYTES)
    _write_ranges(target, SNIFF_BYTES, [(0, head)])
    if not any(reader.can_read(target) for reader in READERS):
        target.unlink()
        fetcher.stats.left_out_files += 1
        return {**version, "left_out": True}
    rest = _fetch(fetcher, remote, [(SNIFF_BYTES, remote.size)])
    _write_ranges(target, remote.size, [(0, head), *rest])
    fetcher.stats.whole_files += 1
    return {**version, "ranges": [[0, remote.size]]}


def _fetch_safetensors(
    fetcher: _Fetcher,
    remote: RemoteFile,
    target: Path,
    read_weights: bool,
    version: dict[str, Any],
) -> dict[str, Any]:
    """Header by range, then the statistics tensors' ranges; a malformed header is mirrored as
    is (its first bytes, the full size) so the local reader refuses it with its own message."""
    head = fetcher.read(remote, 0, 8)
    (length,) = struct.unpack("<Q", head)
    if length > MAX_HEADER_BYTES or 8 + length > remote.size:
        _write_ranges(target, remote.size, [(0, head)])
        return {**version, "ranges": [[0, 8]]}
    raw = fetcher.read(remote, 8, 8 + length)
    header = {"length": length, "tensors": [list(r) for r in _tensor_ranges(remote, raw, length)]}
    tensors = _needed_ranges(header, read_weights)[1:]
    _write_ranges(target, remote.size, [(0, head + raw), *_fetch(fetcher, remote, tensors)])
    fetcher.stats.ranged_files += 1
    ranges = [[0, 8 + length], *([s, e] for s, e in tensors)]
    return {**version, "header": header, "ranges": ranges}


def _tensor_ranges(remote: RemoteFile, raw: bytes, length: int) -> Ranges:
    """The merged byte ranges of the tensors that get statistics; none for a header the local
    reader will refuse (it reads no tensor of such a file)."""
    try:
        parsed = parse_header(raw, 8 + length, remote.size, remote.display)
    except UnreadableInput:
        return []
    return _merged(
        [(e.start, e.end) for e in parsed.entries if holds_statistics(e) and e.end > e.start]
    )


def _needed_ranges(header: dict[str, Any], read_weights: bool) -> Ranges:
    """[start, end) ranges the analysis reads: the header, then (reading weights) the tensors."""
    length = int(header.get("length", 0))
    tensors = header.get("tensors") if read_weights else []
    listed = [(int(r[0]), int(r[1])) for r in tensors or [] if isinstance(r, list) and len(r) == 2]
    return [(0, 8 + length), *listed]


def _merged(ranges: Ranges) -> Ranges:
    merged: Ranges = []
    for start, end in sorted(ranges):
        if merged and start - merged[-1][1] <= MERGE_GAP_BYTES:
            merged[-1] = (merged[-1][0], max(merged[-1][1], end))
        else:
            merged.append((start, end))
    return merged


def _covers(cached: Any, needed: Ranges) -> bool:
    """Whether the cached ranges (a JSON list of [start, end]) hold every needed byte."""
    if not isinstance(cached, list):
        return False
    have = [(int(r[0]), int(r[1])) for r in cached if isinstance(r, list) and len(r) == 2]
    return all(any(s <= start and end <= e for s, e in have) for start, end in needed)


def _same_size(path: Path, size: int) -> bool:
    return is_regular_file(path) and os.lstat(path).st_size == size


def _fetch(fetcher: _Fetcher, remote: RemoteFile, ranges: Ranges) -> list[tuple[int, bytes]]:
    pieces = []
    for start, end in ranges:
        for offset in range(start, end, CHUNK_BYTES):
            pieces.append((offset, fetcher.read(remote, offset, min(end, offset + CHUNK_BYTES))))
    return pieces


def _write_ranges(target: Path, size: int, pieces: list[tuple[int, bytes]]) -> None:
    """A file of `size` bytes holding each piece at its offset (holes read as zeros, take no
    disk where the filesystem supports sparse files)."""
    needed = sum(len(data) for _, data in pieces)
    free = shutil.disk_usage(target.parent).free
    if needed > free:
        raise UsageError(
            f"The cache {target.parent} has {free} bytes free and {target.name} needs {needed}; "
            "set TSCOPE_CACHE_DIR to a larger disk."
        )
    with replacing(target) as handle:
        handle.truncate(size)
        for offset, data in pieces:
            handle.seek(offset)
            handle.write(data)


def _remove_stale(tree: Path, kept: dict[str, dict[str, Any]]) -> None:
    """Files of an earlier mirror that this listing does not hold (or left out): removed, so the
    analysis reads what the store holds now. Links and folders are never followed."""
    wanted = {name for name, entry in kept.items() if not entry.get("left_out")}
    pending = [tree]
    while pending:
        folder = pending.pop()
        with os.scandir(folder) as listing:
            for entry in listing:
                relative = Path(entry.path).relative_to(tree).as_posix()
                if entry.is_dir(follow_symlinks=False):
                    pending.append(Path(entry.path))
                elif relative not in wanted:
                    os.unlink(entry.path)
