"""The explicit list of readers. Discovery asks them in this order; the first that can read wins."""

from __future__ import annotations

from tscope.errors import UsageError
from tscope.ingest.base import Reader
from tscope.ingest.readers.trainer_state import TrainerStateReader

READERS: tuple[Reader, ...] = (TrainerStateReader(),)


def reader_named(name: str) -> Reader:
    for reader in READERS:
        if reader.name == name:
            return reader
    valid = ", ".join(reader.name for reader in READERS)
    raise UsageError(f"Unknown reader {name!r}; valid readers: {valid}")
