"""torch.load that never executes a stranger's pickle unless the user explicitly trusts the file.

Beyond `weights_only=True`, a loaded file is held to what it actually contains:
- it must be a regular file reached without a symlink, and not a Git LFS pointer;
- a zip-format file must store its records uncompressed (as torch.save does), so the bytes its
  tensors own are bytes present in the file;
- no tensor may be a view larger than its storage (a stride-0 `expand(1 << 33)` of one element
  is 1.7 KB on disk and 32 GiB once statistics touch it). Such a file is refused as a whole,
  naming the tensor: statistics of a broadcast view would describe a tensor nobody trained.
"""

from __future__ import annotations

import io
import os
import struct
import sys
import zipfile
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path
from typing import Any, BinaryIO, NamedTuple

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.pickle_decoder import (
    MAX_TUPLE_NESTING,
    UndecodablePickle,
    decode_pickle,
)
from tscope.ingest.checkpoints.pickle_literals import (
    LITERALS_BYTES_FIXED,
    LITERALS_BYTES_PER_BYTE,
    pickle_payload,
    zip_pickle,
)
from tscope.ingest.checkpoints.pickle_nesting import UnreadableZip, torch_pickles_nest_too_deep
from tscope.ingest.lfs_pointer import refuse_lfs_pointer
from tscope.ingest.safe_fs import NOT_REGULAR, SYMLINK_REFUSED, is_regular_file, open_regular

TRUST_HINT = "If you trust the file, pass --trust-pickle."
# torch's messages when weights_only meets a global (or a BUILD) outside its allow-list; only
# then can --trust-pickle change the outcome. Every other failure is a damaged or foreign file.
_REFUSED_GLOBAL_MARKERS = ("Unsupported global", "was not an allowed global", "allowlisted via")
# Containers walked after a load to check every tensor; a state dict has a few per parameter.
MAX_OBJECTS_CHECKED = 10_000_000
# Containers nested inside one another (a state dict nests under 10); the limit of the JSON and
# pickle decoders' nesting too.
MAX_CONTAINER_NESTING = 100
# A reported tensor's path: each key cut to KEY_CHARS characters, the first and last PATH_KEYS.
KEY_CHARS = 60
PATH_KEYS = 8


def _numpy_rng_globals() -> list[Any]:
    """The numpy objects a saved np.random.get_state() tuple needs, as the HF Trainer allows them
    (trainer_pt_utils.safe_globals): _reconstruct, ndarray, dtype and the UInt32 dtype class."""
    import importlib

    import numpy as np

    allowed: list[Any] = [np.ndarray, np.dtype]
    try:
        multiarray = importlib.import_module("numpy._core.multiarray")  # numpy >= 2
    except ImportError:  # pragma: no cover - numpy 1.x
        multiarray = importlib.import_module("numpy.core.multiarray")
    allowed.append(multiarray._reconstruct)
    allowed.append(type(np.dtype(np.uint32)))
    return allowed


def safe_torch_load(
    path: Path, display_path: str, options: LoadOptions, *, allow_numpy: bool = False
) -> Any:
    """Load a torch file with weights_only=True (tensors, dicts, lists, numbers, strings only).

    `allow_numpy` adds the numpy globals that RNG state files hold. A global outside the safe set
    is refused with a message naming the file and the --trust-pickle opt-in; with trust_pickle
    the file is loaded with weights_only=False and a warning on stderr, because that runs code
    from the file. Every other failure is one explained line (UnreadableInput).
    """
    _check_file(path, display_path)
    size = path.stat().st_size
    zipped = _zip_records_check(path, size, display_path)
    if not options.trust_pickle:
        with open_regular(path, display_path) as handle:
            _refuse_deep_nesting(handle, size, display_path)
    return _load(path, zipped, display_path, options, allow_numpy, lambda: pickle_payload(path))


def safe_torch_loads(payload: bytes, display_path: str, options: LoadOptions) -> Any:
    """safe_torch_load of bytes already read (a DCP bytes item): nothing is written to disk."""
    _zip_records_check(io.BytesIO(payload), len(payload), display_path)
    if not options.trust_pickle:
        _refuse_deep_nesting(io.BytesIO(payload), len(payload), display_path)
    return _load(io.BytesIO(payload), False, display_path, options, False, lambda: payload)


def _refuse_deep_nesting(handle: BinaryIO, size: int, display_path: str) -> None:
    """torch's weights_only unpickler hashes what a pickle builds as a dict key; tuples nested a
    million deep crash the process in that hash (SIGSEGV, not an exception), so the file's
    pickles are walked first by the inert decoder."""
    try:
        too_deep = torch_pickles_nest_too_deep(handle, size)
    except UnreadableZip as error:  # read by _zip_records_check a moment ago: changed since
        raise UnreadableInput(display_path, damaged_zip(error.reason), DAMAGED_ZIP_HINT) from error
    if too_deep:
        raise UnreadableInput(
            display_path, f"its pickle nests tuples more than {MAX_TUPLE_NESTING} deep"
        )


def _load(
    source: Path | io.BytesIO,
    mmap: bool,
    display_path: str,
    options: LoadOptions,
    allow_numpy: bool,
    pickle_bytes: Callable[[], bytes | None],
) -> Any:
    import torch

    try:
        if options.trust_pickle:
            print(
                f"tscope: warning: unpickling {display_path} with --trust-pickle: this runs code "
                "from the file.",
                file=sys.stderr,
            )
            loaded = torch.load(source, map_location="cpu", weights_only=False, mmap=mmap)
        elif allow_numpy:
            with torch.serialization.safe_globals(_numpy_rng_globals()):
                loaded = torch.load(source, map_location="cpu", weights_only=True, mmap=mmap)
        else:
            loaded = torch.load(source, map_location="cpu", weights_only=True, mmap=mmap)
    except Exception as error:  # a stranger's file: every failure becomes one explained line
        text = str(error)
        refused = any(marker in text for marker in _REFUSED_GLOBAL_MARKERS)
        # torch's weights-only reader also stops at opcodes it does not implement (FRAME in a
        # protocol-4 pickle): the file is still a real pickle that --trust-pickle would load.
        if refused or ("Unsupported operand" in text and _is_real_pickle(pickle_bytes())):
            raise UnreadableInput(
                display_path, "it holds pickled objects outside the safe set", TRUST_HINT
            ) from error
        raise UnreadableInput(
            display_path, f"not a readable torch file ({_torch_failure(error)})"
        ) from error
    problem = tensor_backing_problem(loaded)
    if problem:
        raise UnreadableInput(display_path, problem)
    return loaded


def _check_file(path: Path, display_path: str) -> None:
    refuse_lfs_pointer(path, display_path)
    if not is_regular_file(path):
        raise UnreadableInput(
            display_path, SYMLINK_REFUSED if os.path.islink(path) else NOT_REGULAR
        )


def _zip_records_check(source: Path | io.BytesIO, size: int, display_path: str) -> bool:
    """Whether the file is torch's zip format (mmap works for it; legacy files are read whole).

    torch's zip reader (miniz) is looser than Python's zipfile: it skips CRC-32 checks, finds a
    record's bytes through the local header whatever name that header holds, and reads entries
    whose extra fields are corrupt. Every check tscope makes on a zip (this one, the nesting walk,
    the records' sizes) goes through zipfile, so a zip that zipfile cannot read in full is refused
    here instead of being handed to torch: a million-deep tuple behind a wrong CRC, a renamed
    local header or a corrupt extra field crashed the process (SIGSEGV), and a deflated data.pkl
    of 1.17 MB unpacked to 1.2 GB. A zip whose records are compressed, or declare more bytes
    than the file holds, is refused too: torch.save writes neither.
    """
    with (
        open_regular(source, display_path) if isinstance(source, Path) else nullcontext(source)
    ) as handle:
        if handle.read(4) != b"PK\x03\x04":
            return False  # torch too tells its legacy format by these four bytes
        handle.seek(0)
        try:
            with zipfile.ZipFile(handle) as archive:
                records = archive.infolist()
                _refuse_unbounded_records(records, size, display_path)
                damage = _zip_damage(archive, handle, size)
        except UnreadableInput:
            raise
        except Exception as error:  # a stranger's zip: zipfile raises more than BadZipFile on one
            damage = _reason(error)
    if damage:
        raise UnreadableInput(display_path, damaged_zip(damage), DAMAGED_ZIP_HINT)
    return True


def damaged_zip(reason: str) -> str:
    """The partial entry of a zip that Python's zipfile cannot read in full."""
    return (
        f"not a readable torch file (a damaged or unsupported zip: {reason}); tscope hands torch "
        "only zips that Python's zipfile reads in full"
    )


DAMAGED_ZIP_HINT = "Copy the file again from where it was written, or re-save it with torch.save"
# CRC-32 is checked streaming, so a record costs this much memory whatever its size.
_CRC_CHUNK_BYTES = 1 << 20
# Local file header: signature, version, flags, method, time, date, CRC-32, compressed and
# uncompressed sizes, name length, extra field length (30 bytes).
_LOCAL_HEADER = struct.Struct("<4s5H3I2H")
# End of central directory (22 bytes, then the comment), the zip64 locator (20 bytes, just
# before it) and the zip64 end record (56 bytes, just before the locator), as torch.save writes.
_END_RECORD = struct.Struct("<4s4H2IH")
_ZIP64_LOCATOR = struct.Struct("<4sIQI")
_ZIP64_END_RECORD = struct.Struct("<4sQ2H2I4Q")


def _refuse_unbounded_records(records: list[zipfile.ZipInfo], size: int, display_path: str) -> None:
    """torch.save stores every record uncompressed, so what the records unpack to is bytes present
    in the file; anything else could unpack to far more than the file (a deflate bomb)."""
    declared = sum(info.file_size for info in records)
    unbounded = any(
        info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size
        for info in records
    )
    if unbounded or declared > size:
        raise UnreadableInput(
            display_path,
            "its zip records are compressed or larger than the file; torch.save writes neither "
            "and tscope reads only bytes present in the file",
        )


def _zip_damage(archive: zipfile.ZipFile, handle: BinaryIO, size: int) -> str:
    """'' when torch would read the zip as zipfile does, else what differs.

    zipfile's own reads check each local header's name against the central directory and the
    CRC-32 of what is read. The checks here close what it does not look at but miniz uses: the
    directory miniz finds from the end records, the local header's method and extra length (the
    start of the record's bytes), and duplicate names (miniz may pick either entry).
    """
    directory = _declared_directory_offset(handle, size)
    if directory != archive.start_dir:
        return "its central directory is not where its end record says"
    names: set[str] = set()
    for info in archive.infolist():
        if info.filename in names:
            return f"two entries are named {info.filename[:80]!r}"
        names.add(info.filename)
        if info.flag_bits & 0x1:
            return f"{info.filename[:80]!r} is encrypted"
        handle.seek(info.header_offset)
        header = handle.read(_LOCAL_HEADER.size)
        if len(header) < _LOCAL_HEADER.size:
            return f"{info.filename[:80]!r} starts past the end of the file"
        fields = _LOCAL_HEADER.unpack(header)
        start = info.header_offset + _LOCAL_HEADER.size + fields[9] + fields[10]
        if fields[3] != zipfile.ZIP_STORED or start + info.compress_size > size:
            return f"{info.filename[:80]!r} is compressed or runs past the end of the file"
        with archive.open(info) as record:  # checks the local header's signature and name
            if _is_tensor_storage(info.filename):
                continue
            while record.read(_CRC_CHUNK_BYTES):  # a CRC-32 mismatch raises at the end
                pass
    return ""


def _is_tensor_storage(name: str) -> bool:
    """`<archive>/data/<key>`: a tensor's raw bytes, which torch maps as numbers and never parses.
    Their sizes and local headers are checked like every record; their CRC-32 is not, which
    would read every byte of a checkpoint of many gigabytes once more. Every other record
    (data.pkl above all) is a few kilobytes to megabytes and is checked in full."""
    parts = name.split("/")
    return len(parts) == 3 and parts[1] == "data" and not name.endswith(".pkl")


def _declared_directory_offset(handle: BinaryIO, size: int) -> int | None:
    """Where the end records (zip64 when present, as torch.save writes) put the central
    directory, read the way miniz reads them; None if they are not at the end of the file.

    zipfile, given a directory offset that does not match where the directory ends, assumes
    bytes were prepended and shifts every offset, while miniz reads at the offsets as written:
    two directories in one file would show each reader a different archive.
    """
    if size < _END_RECORD.size:
        return None
    handle.seek(size - _END_RECORD.size)
    end = _END_RECORD.unpack(handle.read(_END_RECORD.size))
    if end[0] != b"PK\x05\x06" or end[7] != 0:  # torch.save writes no archive comment
        return None
    locator_at = size - _END_RECORD.size - _ZIP64_LOCATOR.size
    if locator_at < _ZIP64_END_RECORD.size:
        return int(end[6])
    handle.seek(locator_at)
    locator = _ZIP64_LOCATOR.unpack(handle.read(_ZIP64_LOCATOR.size))
    if locator[0] != b"PK\x06\x07":
        return int(end[6])
    record_at = locator_at - _ZIP64_END_RECORD.size
    if locator[2] != record_at:
        return None  # zipfile reads the zip64 record just before the locator, miniz here
    handle.seek(record_at)
    record = _ZIP64_END_RECORD.unpack(handle.read(_ZIP64_END_RECORD.size))
    if record[0] != b"PK\x06\x06" or end[6] not in (0xFFFFFFFF, record[9]):
        return None
    return int(record[9])


def _reason(error: Exception) -> str:
    """zipfile's message, short and on one line; the type name when it has none."""
    text = " ".join(str(error).split())[:160]
    return text or type(error).__name__


class _Where(NamedTuple):
    """Where a value sits in what torch loaded, as a link to its container's place: the text is
    built only for the tensor reported. Building "a.b.c" for every value cost the product of
    depth and key length per value: a chain of dicts keyed by one memoized 1000-character
    string (27 KB) took 9 s, and 102 KB over a minute."""

    parent: _Where | None
    key: Any  # a dict key, or the index in a list or tuple
    indexed: bool  # a list or tuple index, shown as [i]
    depth: int  # containers above the value


def tensor_backing_problem(loaded: Any) -> str:
    """'' when every tensor in `loaded` is backed by its own bytes, else what is wrong.

    A tensor whose numel x element size exceeds its storage's bytes overlaps itself (stride 0,
    or strides that revisit elements): computing statistics would materialize the full view.
    Containers nested past MAX_CONTAINER_NESTING refuse the file: torch's unpickler builds a
    million-deep chain of dicts from 5 bytes a level, and real checkpoints nest under 10.
    """
    import torch

    pending: list[tuple[_Where | None, Any]] = [(None, loaded)]
    seen: set[int] = set()
    budget = MAX_OBJECTS_CHECKED
    while pending:
        where, value = pending.pop()
        budget -= 1
        if budget < 0:
            return f"it holds more than {MAX_OBJECTS_CHECKED} objects; tscope does not read it"
        if isinstance(value, torch.Tensor):
            claimed = value.numel() * value.element_size()
            held = value.untyped_storage().nbytes()
            if claimed > held:
                strides = list(value.stride())
                return (
                    f"tensor {_where_text(where)} is a view of {claimed} bytes over a storage "
                    f"of {held} bytes (shape {list(value.shape)}, strides {strides}); tscope "
                    "does not expand views larger than the data in the file"
                )
            continue
        if id(value) in seen:
            continue
        seen.add(id(value))
        depth = where.depth + 1 if where else 1
        if isinstance(value, (dict, list, tuple)) and depth > MAX_CONTAINER_NESTING:
            return (
                f"it nests containers more than {MAX_CONTAINER_NESTING} deep (at "
                f"{_where_text(where)}); tscope does not read it"
            )
        if isinstance(value, dict):
            pending.extend((_Where(where, key, False, depth), v) for key, v in value.items())
        elif isinstance(value, (list, tuple)):
            pending.extend((_Where(where, i, True, depth), v) for i, v in enumerate(value))
    return ""


def _where_text(where: _Where | None) -> str:
    """ "model.layers[0].weight", each key cut to KEY_CHARS characters and the path to its first
    and last PATH_KEYS keys (a crafted key or path can be megabytes)."""
    if where is None:
        return "(top level)"
    steps: list[_Where] = []
    link: _Where | None = where
    while link is not None:  # at most MAX_CONTAINER_NESTING + 1 links
        steps.append(link)
        link = link.parent
    steps.reverse()
    shown: list[_Where | None] = list(steps)
    if len(steps) > 2 * PATH_KEYS:
        shown = [*steps[:PATH_KEYS], None, *steps[-PATH_KEYS:]]
    text = ""
    for step in shown:
        if step is None:
            text += ".…"
        elif step.indexed:
            text += f"[{step.key}]"
        else:
            text += ("." if text else "") + _key_text(step.key)
    return text


def _key_text(key: Any) -> str:
    """A dict key as text, without calling str() on what a stranger chose: an int of thousands
    of digits raises, and a tuple of long strings is as long as they are."""
    if isinstance(key, str):
        return key if len(key) <= KEY_CHARS else key[:KEY_CHARS] + "…"
    if isinstance(key, (bool, float)) or (isinstance(key, int) and key.bit_length() <= 64):
        return str(key)
    return f"<{type(key).__name__}>"


def _is_real_pickle(payload: bytes | None) -> bool:
    """The file's pickle (data.pkl of a zip, else the file) decodes as a complete stream."""
    if payload is None:
        return False
    if payload[:4] == b"PK\x03\x04":  # bytes of a zip: its data.pkl
        payload = zip_pickle(payload)
        if payload is None:
            return False
    try:
        # Within the decoders' memory bound (32 bytes held per pickle byte + 1 MB): a crafted
        # stream that would hold more is no pickle --trust-pickle should be offered for.
        decode_pickle(
            payload,
            max_decoded_bytes=LITERALS_BYTES_PER_BYTE * len(payload) + LITERALS_BYTES_FIXED,
        )
    except UndecodablePickle:  # DecodeBudgetExceeded included
        return False
    return True


def _torch_failure(error: Exception) -> str:
    """The informative line of torch's error: weights_only failures wrap the real reason after
    a generic paragraph ("Weights only load failed. In PyTorch 2.6, ...")."""
    text = str(error).strip()
    if not text:
        return type(error).__name__
    if "WeightsUnpickler error:" in text:
        reason = text.split("WeightsUnpickler error:", 1)[1].strip()
        text = reason or text
    lines = [line for line in text.splitlines() if line.strip()]
    return lines[0][:200] if lines else type(error).__name__
