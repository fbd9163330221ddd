"""Find the readable files under the user's paths and read each with the reader that claims it."""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tscope.errors import UnreadableInput
from tscope.ingest.base import Reader
from tscope.ingest.registry import READERS
from tscope.model import LogRead, PartialInput

# Folders that never hold run artifacts and can be huge.
_SKIPPED_DIRS = {".git", "__pycache__", ".ipynb_checkpoints", "node_modules"}


@dataclass
class Discovery:
    reads: list[LogRead] = field(default_factory=list)
    partial: list[PartialInput] = field(default_factory=list)
    unclaimed: list[str] = field(default_factory=list)


def iter_files(root: Path) -> Iterator[Path]:
    """Every file under root in a stable order, following links once (runs may be symlinks)."""
    if root.is_file():
        yield root
        return
    seen: set[str] = set()
    for directory, subdirs, files in os.walk(root, followlinks=True):
        real = os.path.realpath(directory)
        if real in seen:
            subdirs[:] = []
            continue
        seen.add(real)
        subdirs[:] = sorted(d for d in subdirs if d not in _SKIPPED_DIRS)
        for name in sorted(files):
            yield Path(directory) / name


def display_path(file: Path, root: Path) -> str:
    """The path written into the case: relative to the run root, never absolute."""
    if root.is_file():
        return file.name
    return file.relative_to(root).as_posix()


def discover(
    root: Path,
    readers: tuple[Reader, ...] = READERS,
    on_file: Callable[[str], None] | None = None,
) -> Discovery:
    found = Discovery()
    for file in iter_files(root):
        shown = display_path(file, root)
        reader = next((r for r in readers if r.can_read(file)), None)
        if reader is None:
            found.unclaimed.append(shown)
            continue
        if on_file is not None:
            on_file(shown)
        try:
            found.reads.append(reader.read(file, shown))
        except UnreadableInput as error:
            found.partial.append(PartialInput(error.path, _problem_text(error)))
    return found


def _problem_text(error: UnreadableInput) -> str:
    return f"{error.problem}. {error.hint}" if error.hint else error.problem
