"""The screen a torch file passes before torch.load: how deep do its pickles nest tuples?

CPython hashes a tuple by recursing into its items in C with no recursion guard, so a dict key of
a million nested 1-tuples (2 MB of TUPLE1 opcodes, no global at all) overflows the C stack
(SIGSEGV) inside torch's weights_only unpickler, which builds dict keys as the stream says. The
walk here follows only the stack's shape: each value is the depth of tuples it nests (0 for
anything that is not a tuple), so it builds nothing the file describes and costs a few bytes per
value (about half of what decoding the values costs, `pickle_decoder.decode_pickle`).
"""

from __future__ import annotations

import io
import pickletools
import zipfile
from typing import IO, BinaryIO

from tscope.ingest.checkpoints.pickle_decoder import MAX_TUPLE_NESTING

LEGACY_PICKLES = 5  # torch's legacy format: magic, protocol, sys info, the object, storage keys

_TUPLE_OPS = frozenset({"TUPLE", "TUPLE1", "TUPLE2", "TUPLE3", "FROZENSET"})
# Opcodes that change the object below them and leave it on the stack: it keeps its depth.
_TUPLE_CODES = tuple(
    op.code.encode("latin-1") for op in pickletools.opcodes if op.name in _TUPLE_OPS
)
_MUTATORS = frozenset({"APPEND", "APPENDS", "SETITEM", "SETITEMS", "ADDITEMS", "BUILD"})
_PUTS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})
_GETS = frozenset({"GET", "BINGET", "LONG_BINGET"})


class _Malformed(Exception):
    """The stream is not a pickle this walk follows; the loader that follows reports it."""


class UnreadableZip(Exception):
    """zipfile cannot read the zip in full. Not answered False: torch's reader is looser than
    zipfile (no CRC-32 check, corrupt extra fields read), so it would load the very pickle this
    walk could not see."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


def torch_pickles_nest_too_deep(handle: BinaryIO, size: int) -> bool:
    """Whether a torch file's pickles nest tuples past MAX_TUPLE_NESTING: every `*data.pkl`
    record of a zip (torch reads the one under the archive's first folder; an attacker chooses
    the order), else the first LEGACY_PICKLES pickles of the legacy format, streamed from the
    file. A zip zipfile cannot read raises UnreadableZip; any other failure answers False:
    torch.load reports it."""
    try:
        zipped = handle.read(4) == b"PK\x03\x04"
    except OSError:
        return False
    if zipped:
        try:
            return _zip_nests_too_deep(handle)
        except Exception as error:  # zipfile raises more than BadZipFile on a crafted zip
            reason = " ".join(str(error).split())[:160] or type(error).__name__
            raise UnreadableZip(reason) from error
    try:
        handle.seek(0)
        return _nests_too_deep(handle, LEGACY_PICKLES, size + 1)
    except (OSError, ValueError, NotImplementedError, EOFError):
        return False


def _zip_nests_too_deep(handle: BinaryIO) -> bool:
    handle.seek(0)
    with zipfile.ZipFile(handle) as archive:
        for info in archive.infolist():
            if info.filename.endswith("data.pkl"):
                # Read whole (stored, and at most the file's size, as the records were
                # checked): genops reads byte by byte, 2x slower from a zip stream.
                record = archive.read(info)
                if _could_nest_too_deep(record) and _nests_too_deep(
                    io.BytesIO(record), 1, info.file_size + 1
                ):
                    return True
    return False


def _could_nest_too_deep(record: bytes) -> bool:
    """Nesting N tuples takes N tuple opcodes: fewer bytes that could be one (counted at C speed,
    data bytes included) than the limit means no walk is needed (scheduler.pt, rng_state.pth)."""
    return sum(record.count(code) for code in _TUPLE_CODES) > MAX_TUPLE_NESTING


def _nests_too_deep(stream: IO[bytes], pickles: int, max_opcodes: int) -> bool:
    for _ in range(pickles):
        try:
            if _walk(stream, max_opcodes):
                return True
        except (_Malformed, ValueError, IndexError):  # genops: a truncated or unknown opcode
            return False
        except MemoryError:  # ~8 bytes a value: only a file of gigabytes of 1-byte opcodes
            return False  # torch.load meets the same and reports it
    return False


def _walk(stream: IO[bytes], max_opcodes: int) -> bool:
    """Walk one pickle (up to its STOP); True as soon as a tuple nests past the limit."""
    depths: list[int] = []  # per stack value, the tuple nesting it holds
    marks: list[int] = []  # stack heights at each MARK
    memo: dict[int, int] = {}
    for count, (op, arg, _) in enumerate(pickletools.genops(stream)):
        if count > max_opcodes:
            raise _Malformed
        name = op.name
        if name == "STOP":
            return False
        if name == "MARK":
            marks.append(len(depths))
            continue
        if name == "POP" and marks and marks[-1] == len(depths):
            marks.pop()  # POP of an empty mark drops the mark, as pickle does
            continue
        consumed = _pop(depths, marks, op.stack_before)
        if name in _TUPLE_OPS:
            depth = 1 + max(consumed, default=0)
            if depth > MAX_TUPLE_NESTING:
                return True
            depths.append(depth)
        elif name == "DUP":
            depths.extend(consumed * 2)
        elif name == "MEMOIZE":
            memo[len(memo)] = consumed[0]
            depths.append(consumed[0])
        elif name in _PUTS:
            if not depths:
                raise _Malformed
            memo[int(arg or 0)] = depths[-1]
        elif name in _GETS:
            depths.append(memo.get(int(arg or 0), 0))
        elif name in _MUTATORS:
            depths.append(consumed[0])
        else:
            depths.extend(0 for _ in op.stack_after)
    raise _Malformed  # no STOP


def _pop(depths: list[int], marks: list[int], before: list[pickletools.StackObject]) -> list[int]:
    """The depths an opcode consumes: those below its mark (if it has one), then the slice
    above the mark; a stream that pops more than it pushed is malformed."""
    sliced: list[int] = []
    below = len(before)
    if pickletools.markobject in before:
        below = before.index(pickletools.markobject)
        if not marks:
            raise _Malformed
        start = marks.pop()
        sliced = depths[start:]
        del depths[start:]
    floor = marks[-1] if marks else 0
    if len(depths) - floor < below:
        raise _Malformed
    consumed = depths[len(depths) - below :] if below else []
    del depths[len(depths) - below :]
    return consumed + sliced
