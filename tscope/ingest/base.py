"""The reader interface: one reader per file format."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path
from typing import Protocol

from tscope.errors import UnreadableInput
from tscope.ingest.safe_fs import is_inside, open_regular
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


# The input discovery is reading (a folder, or one file): a reader that looks beside the file it
# was handed (a W&B run's files/, a trainscope run's meta.json) asks `inside_input` first, so a
# file named alone never lends its neighbours (the input is the file, not its folder).
_INPUT_ROOT: ContextVar[Path | None] = ContextVar("tscope_input_root", default=None)


@contextmanager
def reading_input(root: Path) -> Iterator[None]:
    token = _INPUT_ROOT.set(root)
    try:
        yield
    finally:
        _INPUT_ROOT.reset(token)


def inside_input(path: Path) -> bool:
    """Whether `path` lies inside the input being read; True when no input is set (a reader
    called directly, as in tests). A file input holds nothing but itself."""
    root = _INPUT_ROOT.get()
    if root is None:
        return True
    if root.is_file():
        return path == root
    return is_inside(root, path)


# The run the user chose (`tscope analyze --run NAME`) for an input file that holds several runs
# of one tracker (an MLflow SQLite store); None: the file must hold one.
_CHOSEN_RUN: ContextVar[str | None] = ContextVar("tscope_chosen_run", default=None)


@contextmanager
def choosing_run(run: str | None) -> Iterator[None]:
    token = _CHOSEN_RUN.set(run)
    try:
        yield
    finally:
        _CHOSEN_RUN.reset(token)


def chosen_run() -> str | None:
    return _CHOSEN_RUN.get()
