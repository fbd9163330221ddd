"""Filesystem access for inputs that come from strangers.

Every reader opens its files through this module so the promises in docs/security.md hold in one
place: only regular files are read (a FIFO, a device or a socket can hang or never end), nothing
is read through a symlink inside the input tree or outside it, no read is larger than the
file can hold, and a large file that stores far less than its length (sparse) is not read.
"""

from __future__ import annotations

import os
import stat
import threading
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import BinaryIO

from tscope.errors import UnreadableInput

NOT_REGULAR = (
    "not a regular file (a FIFO, device, socket or directory); tscope reads only regular files"
)
SYMLINK_REFUSED = "a symbolic link; tscope does not follow links inside the input"
# What discovery lists for a link met while walking the input tree.
SYMLINK_NOT_FOLLOWED = (
    "a symbolic link; not followed (a link may lead outside the input or to a device). "
    "Copy what it points to into the run folder, or name it on the command line"
)
OUTSIDE_INPUT = "outside the input folder; tscope reads only files inside the input it is given"
# What open_regular says of a file reached through a folder that is now a link.
REACHED_THROUGH_LINK = (
    "reached through a folder that is a symbolic link (it changed while tscope read the "
    "input); tscope does not follow links inside the input"
)
# A hard link is the same file under another name, and that name may lie outside the input: a
# run's config.json hard-linked to ~/.docker/config.json had its registry token copied into
# case.json and case.md (red team, session 29). A file with several names is read only when
# every one of them is inside the input folder (copies, `cp -al` snapshots within the run).
HARD_LINK_OUTSIDE = (
    "a hard link to a file that also has a name outside the input; tscope reads only files "
    "whose every name is inside the input. Copy the file into the run folder (cp, not ln) to "
    "analyze it"
)
# The resolved roots of the input being read (read_inputs): a file under one must be reached
# without any link between the root and it.
_INPUT_ROOTS: ContextVar[tuple[str, ...]] = ContextVar("tscope_input_roots", default=())
# Per root, how many names each multiply-linked file has inside it: counted once, when the
# first such file is opened (most runs have none).
_LINK_CENSUS: ContextVar[dict[str, Counter[tuple[int, int]]] | None] = ContextVar(
    "tscope_link_census", default=None
)
_CENSUS_LOCK = threading.Lock()
# Folders below the root the census walks; discovery reads nothing deeper than 32.
_CENSUS_MAX_DEPTH = 64


@contextmanager
def reading_under(roots: Sequence[Path]) -> Iterator[None]:
    """While inside, every file opened under one of `roots` (resolved: the user's own links are
    followed once) is checked to have been reached without a link (open_regular)."""
    token = _INPUT_ROOTS.set(tuple(os.path.realpath(root) for root in roots))
    census_token = _LINK_CENSUS.set({})
    try:
        yield
    finally:
        _LINK_CENSUS.reset(census_token)
        _INPUT_ROOTS.reset(token)


def _root_of(path: Path) -> str | None:
    """The input root `path` lies under (not the root itself), or None."""
    shown = os.path.abspath(path)
    for root in _INPUT_ROOTS.get():
        if shown.startswith(root.rstrip(os.sep) + os.sep):
            return root
    return None


def _multiply_linked_names(root: str) -> Counter[tuple[int, int]]:
    """(device, inode) -> names inside `root` of every regular file with more than one name;
    no link is followed (links are not read anyway)."""
    names: Counter[tuple[int, int]] = Counter()
    pending = [(root, 0)]
    while pending:
        folder, depth = pending.pop()
        try:
            with os.scandir(folder) as listing:
                for entry in listing:
                    if entry.is_dir(follow_symlinks=False):
                        if depth < _CENSUS_MAX_DEPTH:
                            pending.append((entry.path, depth + 1))
                    elif entry.is_file(follow_symlinks=False):
                        found = entry.stat(follow_symlinks=False)
                        if found.st_nlink > 1:
                            names[(found.st_dev, found.st_ino)] += 1
        except OSError:
            continue
    return names


def named_outside_the_input(path: Path, found: os.stat_result) -> bool:
    """Whether a file with several names (hard links) has one outside the input it is read
    from. A file the user named on the command line is the input itself."""
    if found.st_nlink <= 1:
        return False
    root = _root_of(path)
    census = _LINK_CENSUS.get()
    if root is None or census is None:
        return False
    with _CENSUS_LOCK:
        if root not in census:
            census[root] = _multiply_linked_names(root)
        inside = census[root][(found.st_dev, found.st_ino)]
    return inside < found.st_nlink


def _reached_through_a_link(descriptor: int, path: Path) -> bool:
    """Whether the opened file's real path differs from its path under an input root: some
    folder between the root and the file is a link. O_NOFOLLOW judges the last component only,
    and a sub-folder swapped for a link after discovery listed it had its files read from
    outside the input (red team, session 27). Linux's /proc names the file a descriptor holds;
    elsewhere nothing is compared."""
    roots = _INPUT_ROOTS.get()
    if not roots:
        return False
    shown = os.path.abspath(path)
    if not any(shown == root or shown.startswith(root.rstrip(os.sep) + os.sep) for root in roots):
        return False
    try:
        actual = os.readlink(f"/proc/self/fd/{descriptor}")
    except OSError:
        return False
    return actual != shown


def is_file_refusal(problem: str) -> bool:
    """The problem is tscope refusing to open the file at all (a link, not a regular file), as
    opposed to something found inside it."""
    return problem.startswith(
        (NOT_REGULAR, SYMLINK_REFUSED, "a symbolic link;", REACHED_THROUGH_LINK, HARD_LINK_OUTSIDE)
    )


# What the OS layer raises for a path it cannot even ask about: OSError, and ValueError for a
# NUL byte in the name (a DCP `relative_path` of "__0_0.distcp\x00../x" once ended the analysis
# in a traceback from os.path.realpath). Such a path is "not a usable path", never an error.
UNUSABLE_PATH = (OSError, ValueError)


def is_inside(root: Path, candidate: Path) -> bool:
    """Whether `candidate`, once resolved, lies inside `root` resolved (or is root itself); a
    path the OS cannot resolve (a NUL byte in it) is not."""
    try:
        real_root = os.path.realpath(root)
        real = os.path.realpath(candidate)
    except UNUSABLE_PATH:
        return False
    return real == real_root or real.startswith(real_root.rstrip(os.sep) + os.sep)


def file_identity(path: Path) -> tuple[int, int] | None:
    """(device, inode) of the file at `path`: the same for every name a file has ("m",
    "./m", ".//m", a hard link), None when there is none. Readers key by it what they must read
    once however a stranger's index or metadata spells the name."""
    try:
        found = os.stat(path)
    except UNUSABLE_PATH:
        return None
    return found.st_dev, found.st_ino


def is_regular_file(path: Path) -> bool:
    """A regular file that is not itself a symlink (lstat: the link is judged, not its target)."""
    try:
        return stat.S_ISREG(os.lstat(path).st_mode)
    except UNUSABLE_PATH:
        return False


def is_real_folder(path: Path) -> bool:
    """A folder that is not itself a symlink (lstat). open_regular's O_NOFOLLOW judges only the
    last component of a path, so a reader that steps into a sub-folder by name (DeepSpeed's
    `zero/<param>/`, a DCP folder beside a Trainer checkpoint) checks the folder with this: a
    linked `zero/` once had every optimizer file under it read from outside the input."""
    try:
        return stat.S_ISDIR(os.lstat(path).st_mode)
    except UNUSABLE_PATH:
        return False


# A sparse file claims bytes it does not store: a 16 KB safetensors file claiming a 1.1 TB
# tensor kept the statistics scan reading zeros for an hour, a 5 KB JSONL claiming 4 GB took
# 4.25 GB of memory (red team, session 26). Memory and time must follow what a file holds, so a
# file of a MiB or more storing under 1/HOLLOW_RATIO of its length is refused (from 64 MiB, as
# first set, twenty 64 MB files of 13 KB each still took 11 s and 457 MB). Compressing file
# systems (ZFS, btrfs) also store less than the length; real logs and weights compress far less
# than 64× (text ~3-15×, weights ~1.1×).
HOLLOW_FROM_BYTES = 1024 * 1024
HOLLOW_RATIO = 64


def stored_bytes(found: os.stat_result) -> int:
    return getattr(found, "st_blocks", 0) * 512


def is_hollow(found: os.stat_result) -> bool:
    """A large regular file of which the disk stores under 1/HOLLOW_RATIO (st_blocks counts
    512-byte units on every POSIX system)."""
    if found.st_size < HOLLOW_FROM_BYTES or not hasattr(found, "st_blocks"):
        return False
    return stored_bytes(found) * HOLLOW_RATIO < found.st_size


HOLLOW_HINT = "Copy it without holes (cp --sparse=never) if it is a real file"


def hollow_problem(found: os.stat_result) -> str:
    return (
        f"{found.st_size:,} bytes long but only {stored_bytes(found):,} stored on disk "
        "(a sparse file); tscope reads files whose bytes are all there"
    )


def hollow_file_problem(path: Path) -> str | None:
    """The problem (with its hint) of a hollow regular file at `path`, else None."""
    try:
        found = os.lstat(path)
    except UNUSABLE_PATH:
        return None
    if stat.S_ISREG(found.st_mode) and is_hollow(found):
        return f"{hollow_problem(found)}. {HOLLOW_HINT}"
    return None


def open_regular(path: Path, display_path: str) -> BinaryIO:
    """Open `path` for reading only if it is a regular file reached without a symlink.

    O_NOFOLLOW refuses a link at the last component; O_NONBLOCK keeps open() of a FIFO from
    blocking until fstat can refuse it. The check is made on the opened descriptor, so a file
    swapped between check and open is still judged by what was actually opened.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(path, flags)
    except ValueError as error:  # a NUL byte in the name: no file can have it
        raise UnreadableInput(
            display_path, "cannot open the file (a NUL byte in its name)"
        ) from error
    except OSError as error:
        if os.path.islink(path):
            raise UnreadableInput(display_path, SYMLINK_REFUSED) from error
        raise UnreadableInput(display_path, f"cannot open the file ({error.strerror})") from error
    try:
        found = os.fstat(descriptor)
        if not stat.S_ISREG(found.st_mode):
            raise UnreadableInput(display_path, NOT_REGULAR)
        if _reached_through_a_link(descriptor, path):
            raise UnreadableInput(display_path, REACHED_THROUGH_LINK)
        if named_outside_the_input(path, found):
            raise UnreadableInput(display_path, HARD_LINK_OUTSIDE)
        if is_hollow(found):
            raise UnreadableInput(display_path, hollow_problem(found), HOLLOW_HINT)
        os.set_blocking(descriptor, True)
        return os.fdopen(descriptor, "rb")
    except BaseException:
        os.close(descriptor)
        raise


def pinned_path(handle: BinaryIO) -> Path | None:
    """A name for the file `handle` has open that no rename or link can redirect (Linux's
    /proc/self/fd/N), for a library that must open by name (torch.load with mmap); None where
    the system has none."""
    pinned = Path(f"/proc/self/fd/{handle.fileno()}")
    return pinned if pinned.exists() else None


def read_bytes_bounded(path: Path, display_path: str, limit: int | None = None) -> bytes:
    """The whole file, refusing it when it is larger than `limit` bytes."""
    with open_regular(path, display_path) as handle:
        size = os.fstat(handle.fileno()).st_size
        if limit is not None and size > limit:
            raise UnreadableInput(
                display_path,
                f"{size} bytes, more than the {limit} bytes tscope reads from such a file",
            )
        return handle.read(size if limit is None else limit + 1)
