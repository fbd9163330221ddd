"""Find the readable files under the user's paths and read each with the reader that claims it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tscope.errors import UnreadableInput
from tscope.ingest.base import Reader, read_head, reading_input
from tscope.ingest.registry import READERS
from tscope.ingest.safe_fs import (
    HARD_LINK_OUTSIDE,
    NOT_REGULAR,
    SYMLINK_NOT_FOLLOWED,
    hollow_file_problem,
    named_outside_the_input,
)
from tscope.model import LogRead, PartialInput

# Folders that never hold run artifacts and can be huge.
SKIPPED_DIRS = {".git", "__pycache__", ".ipynb_checkpoints", "node_modules"}
# Told about each entry of the input tree that is not read: (its path, why).
OnSkipped = Callable[[Path, str], None]
# The links the wandb client makes in every run folder it writes, to files it also keeps at their
# real place (wandb/latest-run -> the newest run-*/ folder, wandb/debug*.log -> its logs, a run's
# logs/debug-core.log -> the service's log in the user's cache): never followed like every link,
# but nothing the run lacks, so not listed as partial (every W&B run read "partial").
WANDB_OWN_LINKS = {
    ("wandb", "latest-run"),
    ("wandb", "debug.log"),
    ("wandb", "debug-internal.log"),
    ("logs", "debug-core.log"),
}


@dataclass
class Discovery:
    reads: list[LogRead] = field(default_factory=list)
    partial: list[PartialInput] = field(default_factory=list)
    unclaimed: list[str] = field(default_factory=list)


def iter_files(root: Path, on_skipped: OnSkipped | None = None) -> Iterator[Path]:
    """Every regular file under root, depth first in name order; nothing else is yielded.

    Root itself is the user's choice and may be a link (the CLI resolves it once). Inside it no
    link is followed, to a file or a folder: a link can lead outside the input (`~/.ssh`, `/`)
    or to a device (`/dev/zero`). Links, FIFOs, devices, sockets and folders that cannot be
    listed are passed to `on_skipped` with the reason, so discovery can list them as partial.

    A sub-folder is listed through a descriptor opened without following a link and checked to
    be the very folder its parent's listing saw (device and inode): listed by name later, a
    sub-folder swapped for a link meanwhile had a folder outside the input listed and its files
    read into the case (red team, session 27).
    """
    if root.is_file():
        yield root
        return
    # An explicit stack: a folder nested 100,000 deep cannot exhaust recursion.
    pending: list[tuple[Path, tuple[int, int] | None, int]] = [(root, None, 0)]
    while pending:
        folder, identity, depth = pending.pop()
        if depth > MAX_DEPTH:
            if on_skipped is not None:
                on_skipped(folder, TOO_DEEP)
            continue
        try:
            entries = _listing(folder, identity)
        except OSError as error:
            if on_skipped is not None:
                on_skipped(folder, f"cannot be listed ({error.strerror or error})")
            continue
        if entries is None:
            if on_skipped is not None:
                on_skipped(folder, FOLDER_CHANGED)
            continue
        subfolders = []
        for name, problem, folder_identity in entries:
            path = folder / name
            if problem is not None:
                if on_skipped is not None:
                    on_skipped(path, problem)
            elif folder_identity is not None:
                if name not in SKIPPED_DIRS:
                    subfolders.append((path, folder_identity, depth + 1))
            else:
                yield path
        pending.extend(reversed(subfolders))  # popped in name order


# Folders below the input's root that are listed. Real runs nest a few levels (a Trainer's
# output/checkpoint-N/global_stepN/, wandb/run-*/files/, a DCP folder); a crafted chain of
# folders 400 deep with a file at each level took 99 s to discover (red team, session 28).
MAX_DEPTH = 32
TOO_DEEP = f"nested more than {MAX_DEPTH} folders below the input; not read"
# A sub-folder that is no longer the folder its parent's listing saw.
FOLDER_CHANGED = "changed while tscope read the input (now a link or another folder); not followed"
# An entry of a listing: its name, why it is not read (None: read it), and for a folder its
# (device, inode) as the listing saw it (None: a file).
Entry = tuple[str, str | None, tuple[int, int] | None]


def _listing(folder: Path, identity: tuple[int, int] | None) -> list[Entry] | None:
    """The folder's entries in name order, everything about them read while its descriptor is
    open; None when a sub-folder (`identity` given) is not the one its parent's listing saw."""
    flags = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0)
    if identity is not None:
        flags |= getattr(os, "O_NOFOLLOW", 0)
    try:
        descriptor = os.open(folder, flags)
    except OSError:
        if identity is not None and os.path.islink(folder):
            return None
        raise
    try:
        found = os.fstat(descriptor)
        if identity is not None and (found.st_dev, found.st_ino) != identity:
            return None
        entries: list[Entry] = []
        with os.scandir(descriptor) as listing:
            for entry in sorted(listing, key=lambda entry: entry.name):
                problem = _skip_reason(entry)
                folder_identity = None
                if problem is None and entry.is_dir(follow_symlinks=False):
                    own = entry.stat(follow_symlinks=False)
                    folder_identity = (own.st_dev, own.st_ino)
                elif problem is None:
                    # Listed as partial here; open_regular refuses the same file to any reader.
                    own = entry.stat(follow_symlinks=False)
                    if named_outside_the_input(folder / entry.name, own):
                        problem = HARD_LINK_OUTSIDE
                entries.append((entry.name, problem, folder_identity))
        return entries
    finally:
        os.close(descriptor)


def _skip_reason(entry: os.DirEntry[str]) -> str | None:
    """Why an entry of the input tree is not read, or None for a regular file or a folder."""
    try:
        if entry.is_symlink():
            return SYMLINK_NOT_FOLLOWED
        if entry.is_dir(follow_symlinks=False) or entry.is_file(follow_symlinks=False):
            return None
    except OSError as error:
        return f"cannot be examined ({error.strerror or error})"
    return NOT_REGULAR


def display_path(file: Path, root: Path) -> str:
    """The path written into the case: relative to the run root, never absolute."""
    if root.is_file():
        return file.name
    if file == root:
        return root.name
    return file.relative_to(root).as_posix()


def discover(
    root: Path,
    readers: tuple[Reader, ...] = READERS,
    on_file: Callable[[str], None] | None = None,
) -> Discovery:
    found = Discovery()

    def skipped(path: Path, problem: str) -> None:
        if problem == SYMLINK_NOT_FOLLOWED and (path.parent.name, path.name) in WANDB_OWN_LINKS:
            return
        found.partial.append(PartialInput(display_path(path, root), problem))

    with reading_input(root):
        for file in iter_files(root, on_skipped=skipped):
            _read_one(file, root, readers, found, on_file)
    return found


def _read_claimed(first: Reader, later: Iterator[Reader], file: Path, shown: str) -> LogRead:
    """The first claiming reader's read; when it finds no records, that of a later reader which
    claims the file too and reads metric rows (the sniff matched a producer's line the file holds
    none of the records of: a nanoGPT fork that echoes nanoGPT's config but prints its own step
    lines). Without one, the first reader's outcome (its read, or its UnreadableInput)."""
    read: LogRead | None = None
    failure: UnreadableInput | None = None
    try:
        read = first.read(file, shown)
    except UnreadableInput as error:
        failure = error
    if read is not None and not read.metrics.empty:
        return read
    for reader in later:
        try:
            other = reader.read(file, shown)
        except UnreadableInput:
            continue
        if not other.metrics.empty:
            return other
    if failure is not None:
        raise failure
    assert read is not None
    return read


UTF16_PROBLEM = (
    "UTF-16 text, which tscope does not read: re-save it as UTF-8 "
    "(`iconv -f UTF-16 -t UTF-8 FILE > FILE.utf8`)"
)


def _is_utf16_text(file: Path) -> bool:
    """A UTF-16 byte-order mark, or ASCII text interleaved with NULs (UTF-16 without one)."""
    head = read_head(file, 512)
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        return True
    pairs = head[: len(head) // 2 * 2]
    if len(pairs) < 16:
        return False
    for text, zeros in ((pairs[::2], pairs[1::2]), (pairs[1::2], pairs[::2])):
        if zeros.count(0) == len(zeros) and all(9 <= byte <= 126 for byte in text):
            return True
    return False


def _read_one(
    file: Path,
    root: Path,
    readers: tuple[Reader, ...],
    found: Discovery,
    on_file: Callable[[str], None] | None,
) -> None:
    shown = display_path(file, root)
    hollow = hollow_file_problem(file)
    if hollow is not None:  # every reader would refuse it: named, not "unknown format"
        found.partial.append(PartialInput(shown, hollow))
        return
    claiming = (r for r in readers if r.can_read(file))
    reader = next(claiming, None)
    if reader is None:
        if _is_utf16_text(file):
            # Excel's "Unicode text" and PowerShell's `>` write UTF-16: the readers take UTF-8,
            # and "unknown format" named the wrong reason.
            found.partial.append(PartialInput(shown, UTF16_PROBLEM))
        else:
            found.unclaimed.append(shown)
        return
    if on_file is not None:
        on_file(shown)
    try:
        found.reads.append(_read_claimed(reader, claiming, file, shown))
    except UnreadableInput as error:
        found.partial.append(PartialInput(error.path, error.problem_text))
    except MemoryError:
        # Whatever the reader held is released with its frames; the file's bounds (see
        # docs/security.md) keep real logs far below this, so one line, not a traceback.
        found.partial.append(
            PartialInput(
                shown,
                "ran out of memory reading it (the file is much larger than a training log "
                "of its kind, or crafted); it was left out",
            )
        )
