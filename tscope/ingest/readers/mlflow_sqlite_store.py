"""An MLflow SQLite store opened for reading: the file's bytes in an in-memory database, checked,
indexed by run, and kept for the next read of the same file in this process.

The file is a stranger's: its bytes are read (bounded) and deserialized, so SQLite never opens
the path (no journal or WAL file is touched, no link followed); the connection is query-only
with an untrusted schema, and every use runs its queries under a work budget and a deadline that
interrupt them. `tscope cluster mlflow.db` reads one run per task: each task once read and
deserialized the whole store again and scanned its metrics table for its run (a 200 MB store of
100 runs: 46 s, red team round 8). A worker now keeps the last store it opened, and an index on
(run_uuid, key), made in the in-memory copy once the tables are checked, turns each run's
queries into lookups.
"""

from __future__ import annotations

import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from tscope.ingest.safe_fs import read_bytes_bounded

# A store holding millions of points is a few hundred MB; memory is twice the file while read.
MAX_STORE_BYTES = 1024**3
# SQLite virtual-machine steps between two checks of the budget, and the budget: a query over a
# real store takes ~10 steps a row.
_PROGRESS_EVERY = 10_000
_STEPS_PER_BYTE = 20
# The longest value a query may produce (a param value is at most 8,000 characters in mlflow 3).
MAX_VALUE_BYTES = 1024 * 1024
# The deadline of one use's queries: this long plus a second per 20 MB (a real 77 MB store:
# ~2 s).
MIN_SECONDS = 10.0
BYTES_PER_SECOND = 20e6


def _lenient_text(raw: bytes) -> str:
    return raw.decode("utf-8", errors="replace")


class _Store:
    """The store's bytes as a query-only in-memory database; temporary b-trees (a sort) in
    memory, never in a file under /var/tmp (outside --out); no value longer than MAX_VALUE_BYTES
    (a generated column of zeroblob(900000000) was one step of the budget and 10 GB of
    temporary file)."""

    def __init__(self, data: bytes) -> None:
        self.size = len(data)
        self.indexed = False
        self.connection = sqlite3.connect(":memory:")
        # Text that is not UTF-8 (a stranger's metric key) reads with replacement characters
        # instead of failing the whole store; SQLite's own messages can still carry such bytes
        # (a malformed schema entry's name), hence UnicodeDecodeError beside sqlite3.Error.
        self.connection.text_factory = _lenient_text
        # A store in WAL mode (header bytes 18-19 = 2) cannot be deserialized as it is; its WAL
        # file is not read either way (the store's own pages are what it holds).
        image = bytearray(data)
        if len(image) > 19 and image[18] == image[19] == 2:
            image[18] = image[19] = 1
        self.connection.setlimit(sqlite3.SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)
        self.connection.execute("PRAGMA temp_store = MEMORY")
        self.connection.deserialize(bytes(image))
        self._budget = 0
        self._deadline = 0.0
        self.arm()
        self.connection.set_progress_handler(self._spend, _PROGRESS_EVERY)
        self.connection.execute("PRAGMA trusted_schema = OFF")
        self.connection.execute("PRAGMA query_only = ON")

    def arm(self) -> None:
        """A fresh budget and deadline for one use (one run read, one listing)."""
        self._budget = max(1, _STEPS_PER_BYTE * self.size // _PROGRESS_EVERY)
        self._deadline = time.monotonic() + MIN_SECONDS + self.size / BYTES_PER_SECOND

    def _spend(self) -> int:
        self._budget -= 1
        # Non-zero interrupts the query.
        return 1 if self._budget < 0 or time.monotonic() > self._deadline else 0

    def index_runs(self) -> None:
        """Index the metrics by run in the in-memory copy (the file is never written)."""
        if self.indexed:
            return
        self.connection.execute("PRAGMA query_only = OFF")
        try:
            self.connection.execute(
                "CREATE INDEX IF NOT EXISTS tscope_metrics_by_run ON metrics(run_uuid, key)"
            )
        finally:
            self.connection.execute("PRAGMA query_only = ON")
        self.indexed = True

    def close(self) -> None:
        self.connection.close()


# The last store this process opened, with the file's identity when it was read; kept only in
# a process that asked for it (`keep_last_store`: a cluster worker, which reads one run of the
# same store per task), so a library caller's process does not hold a store after its read.
_LAST: list[tuple[tuple[int, int, int, int], _Store]] = []
_KEEP: list[bool] = [False]


def keep_last_store() -> None:
    """From now on this process keeps the last store it opened for the next read of it."""
    _KEEP[0] = True


@contextmanager
def opened_store(
    path: Path, display_path: str, check: Callable[[sqlite3.Connection, str], None]
) -> Iterator[sqlite3.Connection]:
    """The store at `path`, its tables passed by `check` (which raises when they are not plain
    tables) before they are indexed; reused while the file is unchanged (its device, inode,
    size and modification time, read without following a link)."""
    identity = _identity(path)
    store = _LAST[0][1] if _LAST and identity is not None and _LAST[0][0] == identity else None
    if store is None:
        _forget()
        store = _Store(read_bytes_bounded(path, display_path, MAX_STORE_BYTES))
        if identity is not None:
            _LAST.append((identity, store))
    store.arm()
    try:
        check(store.connection, display_path)
        store.index_runs()
        yield store.connection
    except BaseException:
        _forget()  # a store that failed once is read afresh next time
        store.close()
        raise
    if identity is None or not _KEEP[0]:
        _forget()
        store.close()


def _forget() -> None:
    while _LAST:
        _LAST.pop()[1].close()


def _identity(path: Path) -> tuple[int, int, int, int] | None:
    try:
        stat = os.lstat(path)
    except (OSError, ValueError):
        return None
    return stat.st_dev, stat.st_ino, stat.st_size, stat.st_mtime_ns
