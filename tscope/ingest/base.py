"""The reader interface: one reader per file format."""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

from tscope.errors import UnreadableInput
from tscope.ingest.safe_fs import open_regular
from tscope.model import LogRead


class Reader(Protocol):
    """Reads one file format into a LogRead.

    `can_read` must be cheap (names and the first bytes only): discovery asks every reader about
    every file. `read` raises `UnreadableInput` when the file is unusable; for a file that is only
    partly usable it returns what it could read and lists the problem in `LogRead.partial`.
    """

    name: str

    def can_read(self, path: Path) -> bool: ...

    def read(self, path: Path, display_path: str) -> LogRead: ...


def read_head(path: Path, size: int = 4096) -> bytes:
    """The first bytes of a regular file, for magic-byte checks; empty for anything else (a FIFO
    would block, a link may lead outside the input) and on any OS error."""
    try:
        with open_regular(path, path.name) as handle:
            return handle.read(size)
    except (OSError, UnreadableInput):
        return b""
