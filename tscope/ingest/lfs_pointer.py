"""Git LFS pointer files: the ~130-byte text a clone leaves where a large file should be.

Cloning a Hugging Face Hub repository (or any repo using Git LFS) without `git lfs pull` leaves
`model.safetensors`, `optimizer.pt`, `events.out.tfevents.*` ... as small text files:

    version https://git-lfs.github.com/spec/v1
    oid sha256:4d7a2146...
    size 498135208

Every reader would otherwise call them corrupt (or, for torch files, "pickled objects outside the
safe set"). The detector is shared: checkpoint readers and log readers both call it before
parsing, and report the file with `LFS_POINTER_PROBLEM` instead.
"""

from __future__ import annotations

import os
from pathlib import Path

from tscope.errors import UnreadableInput

# The spec (git-lfs docs/spec.md) caps pointer files at 1024 bytes and fixes the first line; the
# hawser URL is the pre-1.0 name of the same spec, still accepted by git-lfs.
MAX_POINTER_BYTES = 1024
_VERSION_LINES = (
    b"version https://git-lfs.github.com/spec/v1\n",
    b"version https://hawser.github.com/spec/v1\n",
)
LFS_POINTER_PROBLEM = "Git LFS pointer, not the file: run `git lfs pull` to fetch it"


def is_lfs_pointer(path: Path) -> bool:
    """Whether `path` is a regular file holding a Git LFS pointer (cheap: one small read).

    Never raises: a file that cannot be opened is simply not a pointer, and the caller's own
    open reports why.
    """
    flags = os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0)
    try:
        descriptor = os.open(path, flags)
    except OSError:
        return False
    try:
        status = os.fstat(descriptor)
        # S_ISREG via the mode bits: a FIFO opened non-blocking must not be read at all.
        if (status.st_mode & 0o170000) != 0o100000 or status.st_size > MAX_POINTER_BYTES:
            return False
        head = os.read(descriptor, MAX_POINTER_BYTES)
    except OSError:
        return False
    finally:
        os.close(descriptor)
    return is_lfs_pointer_bytes(head)


def is_lfs_pointer_bytes(head: bytes) -> bool:
    """The spec's shape: the version line first, then an `oid sha256:` and a `size` line."""
    if len(head) > MAX_POINTER_BYTES or not head.startswith(_VERSION_LINES):
        return False
    lines = head.split(b"\n")
    return any(line.startswith(b"oid sha256:") for line in lines) and any(
        line.startswith(b"size ") for line in lines
    )


def refuse_lfs_pointer(path: Path, display_path: str) -> None:
    """Raise UnreadableInput naming the fix when `path` is an LFS pointer; else do nothing."""
    if is_lfs_pointer(path):
        raise UnreadableInput(display_path, LFS_POINTER_PROBLEM)
