"""CSV through Arrow, for tabular.py: the header of a very wide table, and the parse itself.

Arrow converts every column it is not told to skip and needs the header within one block, so a
table with 100,000 columns used to be refused (a 1 MB block) or to take 24 s; tabular.py reads at
most series_cap.MAX_TABLE_COLUMNS of them, chosen from the header read here.
"""

from __future__ import annotations

import csv
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Any, BinaryIO

from tscope.ingest.base import read_head
from tscope.ingest.logs.series_cap import MAX_TABLE_COLUMNS, columns_to_read

if TYPE_CHECKING:
    import pyarrow as pa

# Bytes Arrow parses at a time; a header longer than this is refused as unreadable.
CSV_BLOCK_BYTES = 32 * 1024 * 1024


def wide_csv_header(path: Path, delimiter: str, head: bytes | None = None) -> list[str] | None:
    """The header's column names when the file has more than MAX_TABLE_COLUMNS, else None
    (`head`: the file's first CSV_BLOCK_BYTES, when the caller has read them)."""
    if head is None:
        head = read_head(path, CSV_BLOCK_BYTES)
    first_line = head.split(b"\n", 1)[0]
    if first_line.count(delimiter.encode()) < MAX_TABLE_COLUMNS:
        return None
    try:
        # Decoded as the reader decodes a header that is not UTF-8 (tabular._utf8_header), so
        # the names chosen are the names Arrow then sees.
        text = first_line.decode("utf-8-sig", errors="replace").rstrip("\r")
        names = next(csv.reader([text], delimiter=delimiter))
    except (csv.Error, StopIteration):
        return None  # Arrow reads it (or reports it) as before
    # Repeated names count too: read whole, `step,loss,x,x,…` with 200,000 columns took 1.3 GB
    # (a 4 MB header, 12 GB). wide_csv_columns chooses among the distinct names.
    return names if len(names) > MAX_TABLE_COLUMNS else None


def wide_csv_columns(header: list[str]) -> tuple[list[str], str]:
    """The columns of a wide header to read, and the `partial` line saying how many are not.

    At most MAX_TABLE_COLUMNS distinct names (series_cap.columns_to_read). A repeated name
    stands for its first column: Arrow's include_columns selects that one, and from_arrow keeps
    only the first column of a name in any table.
    """
    distinct = list(dict.fromkeys(header))
    chosen = columns_to_read(distinct)
    reasons = []
    repeats = len(header) - len(distinct)
    if repeats:
        reasons.append(
            f"{repeats} repeat the name of an earlier column (the first column of a name is read)"
        )
    if len(distinct) > len(chosen):
        reasons.append(
            f"{len(distinct) - len(chosen)} more: tscope reads at most {MAX_TABLE_COLUMNS} "
            "columns of a table (the step and loss-like ones first)"
        )
    unread = len(header) - len(chosen)
    return chosen, f"{unread} of its {len(header)} columns not read: {'; '.join(reasons)}"


def parse_csv(
    handle: BinaryIO,
    delimiter: str,
    on_malformed: Any,
    columns: list[str] | None,
    null_values: Sequence[str],
) -> pa.Table:
    """The table Arrow parses; `columns`: convert only these (None: all).

    Arrow reads in the calling thread (`use_threads=False`): its threaded reader calls the Python
    `on_malformed` from worker threads and drops its last reference to itself, to `handle` and to
    `on_malformed`, from a worker after read_csv has returned. Releasing those Python objects
    takes the GIL; once the interpreter has begun to exit (the error path of a 1,000,000-name
    header reaches exit before Arrow has freed it), Python ends that worker with pthread_exit,
    whose unwinding meets a C++ noexcept frame: `terminate called without an active exception`,
    SIGABRT, after tscope had printed its error. The serial reader frees all it holds (its one
    read-ahead thread included) before read_csv returns. A million-row metrics CSV still reads
    in about a second.
    """
    import pyarrow.csv as pa_csv  # here: a TensorBoard or Trainer log never needs Arrow

    return pa_csv.read_csv(
        handle,
        # The header must fit in one block: Arrow's default 1 MB refuses 100,000 columns.
        read_options=pa_csv.ReadOptions(block_size=CSV_BLOCK_BYTES, use_threads=False),
        parse_options=pa_csv.ParseOptions(delimiter=delimiter, invalid_row_handler=on_malformed),
        convert_options=pa_csv.ConvertOptions(
            null_values=list(null_values),
            strings_can_be_null=True,
            check_utf8=False,
            # Arrow converts every column it is not told to skip: 100,000 columns took 24 s.
            include_columns=columns,
        ),
    )


@contextmanager
def without_row_decoding_dumps() -> Iterator[None]:
    """pyarrow decodes a malformed row as UTF-8 before it calls the row handler; for a binary row
    that fails inside pyarrow, which prints a traceback through sys.unraisablehook and then fails
    the read (ArrowInvalid: reported as partial). Keep that dump off the user's terminal."""
    previous = sys.unraisablehook

    def hook(unraisable: Any) -> None:
        if not isinstance(unraisable.exc_value, UnicodeDecodeError):
            previous(unraisable)

    sys.unraisablehook = hook
    try:
        yield
    finally:
        sys.unraisablehook = previous
