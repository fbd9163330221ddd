"""Writing into the output folder: never through a link, and only into a folder tscope owns.

Case folders get reused (`--out` again, `tscope report CASE_DIR`) and may come back from a
stranger: a `case.html` planted as a link to `~/.bashrc` must not get the report written into
the file it points at. So every file tscope writes is first written to a fresh temporary name in
the same folder (created here with O_EXCL, so it cannot be a planted link), then renamed onto its
name; the rename replaces whatever sat at that name (a file or a link) and never follows it. The
folder is opened with O_NOFOLLOW and the temporary file and the rename are made relative to that
descriptor, so a folder swapped for a link during the write is not followed either.

A case folder must hold only what its case wrote: `prepare_folder` refuses a folder that holds
files tscope does not own (names outside the caller's list) and removes the owned leftovers of an
earlier case, so a stale layers.parquet never sits beside a case that has no checkpoints.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable, Collection, Iterator
from contextlib import contextmanager, suppress
from fnmatch import fnmatchcase
from pathlib import Path
from typing import BinaryIO

from tscope.errors import UsageError

# Write-only, created by us (O_EXCL: fails on any existing name, a link included), never a link.
_CREATE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
_FOLDER_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)
# rw-r--r-- before the umask, as open() gives a new file.
_FILE_MODE = 0o666
_TEMPORARY_PREFIX = ".tscope-writing-"


def is_owned(name: str, owned: Collection[str]) -> bool:
    """Whether `name` is one tscope writes into this kind of folder (`owned` may hold globs such as
    `case-*.svg`); the temporary files of an interrupted write count as owned."""
    return name.startswith(_TEMPORARY_PREFIX) or any(fnmatchcase(name, p) for p in owned)


def prepare_folder(
    path: Path,
    what: str,
    owned: Collection[str] | None = None,
    clear: bool = False,
    option: str = "--out",
) -> Path:
    """The output folder for `what` ("the case"), created if needed, checked and tidied.

    Refused (one-line UsageError): a folder that is a symbolic link, a path that is not a folder,
    and a folder holding entries whose names are not in `owned` (someone else's files). With
    `clear`, the owned files of an earlier run are removed first, so the folder ends up holding
    only what this run writes. `owned=None` checks only that the folder is a folder, not a link.
    """
    fix = f"Pass {option} with a new or empty folder, or one tscope wrote"
    if path.is_symlink():
        raise UsageError(
            f"Cannot write {what} into {path}: it is a symbolic link, and tscope never writes "
            f"through a link. Pass {option} with the folder it points to, or another folder."
        )
    try:
        path.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise UsageError(f"Cannot write {what} into {path}: it is not a folder. {fix}.") from None
    except OSError as error:
        raise UsageError(
            f"Cannot write {what} into {path}: {error.strerror or error}. "
            f"Pass {option} with a folder you can write to."
        ) from error
    if owned is None:
        return path
    entries = sorted(os.listdir(path))
    foreign = [name for name in entries if not is_owned(name, owned)]
    if foreign:
        shown = ", ".join(foreign[:3]) + (
            f" and {len(foreign) - 3} more" if len(foreign) > 3 else ""
        )
        raise UsageError(
            f"Cannot write {what} into {path}: it holds files tscope did not write ({shown}). "
            f"{fix}."
        )
    if clear:
        for name in entries:
            _remove_owned(path / name)
    return path


def _remove_owned(path: Path) -> None:
    """Remove a file (or a link: the link itself, never its target) an earlier run left."""
    try:
        mode = os.lstat(path).st_mode
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(mode):
        path.unlink()


def make_subfolder(root: Path, *parts: str) -> Path:
    """root/part/part…, each level created if needed and refused when it is a link (a planted
    `runs -> ~` must not receive the cluster's cache)."""
    folder = root
    for part in parts:
        folder = folder / part
        try:
            folder.mkdir(exist_ok=True)
        except OSError as error:
            raise UsageError(
                f"Cannot create {folder}: {error.strerror or error}. Pass --out with a folder "
                "you can write to."
            ) from error
        if folder.is_symlink() or not folder.is_dir():
            raise UsageError(
                f"Cannot write into {folder}: it is a symbolic link or not a folder, and tscope "
                "never writes through a link. Remove it, or pass --out with another folder."
            )
    return folder


# What writing a file can meet on the way: no space, no quota, a file too large for the file
# system, a read-only remount, an I/O error.
_WRITE_FAILURES = frozenset(
    {errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EROFS, errno.EIO, errno.EACCES, errno.EPERM}
)


@contextmanager
def replacing(path: Path) -> Iterator[BinaryIO]:
    """A binary handle whose bytes become `path` when the block ends without an exception.

    Written under a fresh temporary name in path's folder, then renamed onto the name: readers
    never see half a file, and whatever stood at `path` (a planted link included) is replaced,
    not written through.
    """
    folder = _open_folder(path.parent)
    try:
        temporary = f"{_TEMPORARY_PREFIX}{secrets.token_hex(8)}-{path.name}"[:255]
        try:
            descriptor = os.open(temporary, _CREATE_FLAGS, _FILE_MODE, dir_fd=folder)
        except OSError as error:
            raise UsageError(
                f"Cannot write {path}: {error.strerror or error}. Pass --out with a folder you "
                "can write to."
            ) from error
        try:
            with os.fdopen(descriptor, "wb") as handle:
                yield handle
            _rename(temporary, path, folder)
        except OSError as error:
            _unlink_quietly(temporary, folder)
            if error.errno not in _WRITE_FAILURES:
                raise
            # A full disk or quota mid-write ended the command in a traceback (red team,
            # session 29): one line naming the file, like every refusal to write.
            raise UsageError(
                f"Cannot write {path}: {error.strerror or error}. Free space there or pass "
                "--out with a folder that has room."
            ) from None
        except BaseException:
            _unlink_quietly(temporary, folder)
            raise
    finally:
        os.close(folder)


def write_bytes(path: Path, data: bytes) -> Path:
    with replacing(path) as handle:
        handle.write(data)
    return path


def write_text(path: Path, text: str) -> Path:
    """UTF-8 with "\\n" line endings on every platform, so reports are byte-identical.

    A lone surrogate (a byte of a non-UTF-8 file name, which Python decodes with surrogateescape)
    has no UTF-8 form: the renderers escape them (`visible`, json_text), and any that still gets
    here is written as its `\\udcff` escape rather than ending the command in a traceback.
    """
    return write_bytes(path, text.encode("utf-8", "backslashreplace"))


def write_with(path: Path, writer: Callable[[BinaryIO], object]) -> Path:
    """Let a library writer (pyarrow, numpy, pandas) write `path` through `replacing`."""
    with replacing(path) as handle:
        writer(handle)
    return path


def _open_folder(folder: Path) -> int:
    try:
        return os.open(folder, _FOLDER_FLAGS)
    except OSError as error:
        problem = (
            "it is a symbolic link, and tscope never writes through a link"
            if folder.is_symlink()
            else str(error.strerror or error)
        )
        raise UsageError(
            f"Cannot write into {folder}: {problem}. Pass --out with another folder."
        ) from error


def _rename(temporary: str, path: Path, folder: int) -> None:
    """The finished file onto its name; rename(2) replaces a link at the name, never follows it."""
    try:
        os.replace(temporary, path.name, src_dir_fd=folder, dst_dir_fd=folder)
    except OSError as error:  # e.g. a folder planted under the name
        raise UsageError(
            f"Cannot write {path}: {error.strerror or error}. Remove it, or pass --out with "
            "another folder."
        ) from error


def _unlink_quietly(name: str, folder: int) -> None:
    with suppress(OSError):  # already gone; the error being raised matters more
        os.unlink(name, dir_fd=folder)
