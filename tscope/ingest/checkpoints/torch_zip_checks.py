"""The zip checks a torch zip file passes before torch.load sees it (safe_load's archive job).

torch's zip reader (miniz) is looser than Python's zipfile, so a zip is handed to torch only when
zipfile reads all of it, its records are stored uncompressed within the file's size, and its end
records, local headers and names say what zipfile saw. Kept apart from safe_load.py, which decides
how a file is unpickled and checks what the unpickling built: this module reads only the archive's
structure and decodes the pickle's storage claims inertly; it never unpickles anything.
"""

from __future__ import annotations

import struct
import zipfile
from contextlib import nullcontext
from pathlib import Path
from typing import Any, BinaryIO

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.pickle_decoder import (
    MAX_OPCODES,
    DecodeBudgetExceeded,
    PickledObject,
    UndecodablePickle,
    decode_pickle,
)
from tscope.ingest.checkpoints.pickle_literals import decode_budget
from tscope.ingest.safe_fs import open_regular


def zip_records_check(source: Path | BinaryIO, size: int, display_path: str) -> bool:
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
        handle.seek(0)
        if handle.read(4) != b"PK\x03\x04":
            return False  # torch too tells its legacy format by these four bytes
        handle.seek(0)
        overrun = ""
        try:
            with zipfile.ZipFile(handle) as archive:
                records = archive.infolist()
                _refuse_unbounded_records(records, size, display_path)
                damage = _zip_damage(archive, handle, size)
                overrun = "" if damage else _storage_overrun(archive)
        except UnreadableInput:
            raise
        except CraftedPickle as crafted:
            raise UnreadableInput(display_path, f"not a readable torch file ({crafted})") from None
        except Exception as error:  # a stranger's zip: zipfile raises more than BadZipFile on one
            damage = _reason(error)
    if damage:
        raise UnreadableInput(display_path, damaged_zip(damage), DAMAGED_ZIP_HINT)
    if overrun:
        raise UnreadableInput(
            display_path,
            f"not a readable torch file ({overrun}); tscope reads a tensor only from its own "
            "record",
            DAMAGED_ZIP_HINT,
        )
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


class CraftedPickle(Exception):
    """The pickle asks torch's unpickler for what no torch.save writes (see _storage_overrun)."""


def _allocates(global_name: str) -> bool:
    """A callable that the weights_only unpickler admits and that allocates what an integer
    argument asks: bytearray(N), torch.FloatTensor(N), torch.Tensor(N), UntypedStorage(N)."""
    return global_name == "builtins.bytearray" or (
        global_name.startswith("torch.") and global_name.endswith(("Tensor", "Storage"))
    )


def _refuse_allocating_call(call: PickledObject) -> None:
    """torch.save rebuilds tensors from their own records (_rebuild_tensor_v2 of a storage);
    it never calls a constructor with a size, which a 1 KB file used to have torch allocate 3 GB
    of zeros and 4 GB of uninitialised floats whose statistics were then shown (red team, session
    29). _rebuild_from_type_v2(func, type, args, state) calls `func(*args)` too."""
    target, arguments = call.global_name, call.args
    if target == "torch._tensor._rebuild_from_type_v2" and len(arguments) >= 3:
        inner, inner_arguments = arguments[0], arguments[2]
        if isinstance(inner, PickledObject) and isinstance(inner_arguments, tuple):
            target, arguments = inner.global_name, inner_arguments
    if target.endswith("multiarray._reconstruct") and len(arguments) >= 2:
        # numpy pickles an array as _reconstruct(ndarray, (0,), b'b') and sets its shape and
        # bytes by BUILD; a shape here is an allocation (RNG state files admit numpy: a 462-byte
        # rng_state.pth took 987 MB)
        shape = arguments[1] if isinstance(arguments[1], tuple) else (arguments[1],)
        arguments = tuple(a for a in shape if a != 0)
        target = "builtins.bytearray"
    sized = any(isinstance(a, int) and not isinstance(a, bool) for a in arguments)
    if sized and _allocates(target):
        raise CraftedPickle(
            f"its pickle calls {target[:80]} with a size, which torch.save never writes"
        )


def _storage_overrun(archive: zipfile.ZipFile) -> str:
    """'' when every tensor storage the pickle names fits in its record, else which does not.

    torch maps a storage as `numel` elements from the start of its record, as many as the pickle
    claims: a claim past the record's end read the next records' headers and tensors as numbers
    (in memory too, torch allocates the claim and copies the record into it). The claims are the
    pickle's persistent ids, decoded inertly (nothing is imported or called). A pickle that would
    build far more than its size or calls an allocator with a size raises CraftedPickle.
    """
    record_bytes = {info.filename: info.file_size for info in archive.infolist()}
    for info in archive.infolist():
        if not info.filename.endswith("data.pkl"):
            continue
        claims: list[Any] = []
        # torch's unpickler builds what the decoder would: refused beyond the decoders' bound
        budget = decode_budget(info.file_size)
        try:
            # one opcode is at least one byte: the record's size bounds the walk
            decode_pickle(
                archive.read(info),
                max_opcodes=max(MAX_OPCODES, info.file_size),
                max_decoded_bytes=budget,
                persistent_ids=claims,
                on_call=_refuse_allocating_call,
            )
        except DecodeBudgetExceeded as error:
            raise CraftedPickle(
                f"its pickle of {info.file_size} bytes would build far more objects than "
                f"real checkpoints do ({error}); torch.save writes none such"
            ) from None
        except UndecodablePickle:
            continue  # torch.load meets the same bytes and reports what it cannot read
        folder = info.filename[: -len("data.pkl")]
        for claim in claims:
            problem = _claim_problem(claim, folder, record_bytes)
            if problem:
                return problem
    return ""


def _claim_problem(claim: Any, folder: str, record_bytes: dict[str, int]) -> str:
    """'' unless the persistent id is a storage claim larger than its record."""
    if not (isinstance(claim, tuple) and len(claim) == 5 and claim[0] == "storage"):
        return ""  # not a storage: torch refuses what its reader does not know
    _, storage_type, key, _, numel = claim
    name = f"{folder}data/{key}"
    type_name = storage_type.global_name if isinstance(storage_type, PickledObject) else ""
    element = _STORAGE_ELEMENT_BYTES.get(type_name)
    if element is None or not isinstance(numel, int) or name not in record_bytes:
        return ""  # torch refuses an unknown type or a missing record itself
    claimed = numel * element
    if claimed <= record_bytes[name]:
        return ""
    return (
        f"tensor storage {str(key)[:80]!r} claims {claimed} bytes but its record holds "
        f"{record_bytes[name]}"
    )


# Bytes per element of each storage type torch.save names in a pickle: torch's legacy typed
# storages (torch.storage._dtype_to_storage_type_map, closed to new dtypes, which are saved as
# UntypedStorage of bytes) and UntypedStorage.
_STORAGE_ELEMENT_BYTES = {
    f"torch.{name}Storage": size
    for name, size in {
        "Double": 8, "Float": 4, "Half": 2, "BFloat16": 2, "Long": 8, "Int": 4, "Short": 2,
        "Char": 1, "Byte": 1, "Bool": 1, "ComplexDouble": 16, "ComplexFloat": 8, "QInt8": 1,
        "QInt32": 4, "QUInt8": 1, "QUInt4x2": 1, "QUInt2x4": 1, "Untyped": 1,
    }.items()
} | {"torch.storage.UntypedStorage": 1}  # fmt: skip
# (torch.save names the storages of its newer dtypes by the class's module path: a claim under
# that name went unchecked and torch read the next records as the tensor, red team, session 29.)


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
