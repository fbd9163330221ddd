"""Metric tables in CSV, TSV, JSON Lines and JSON, parsed fast into aligned numeric columns.

Shared by the generic metrics-table reader and the W&B export and history readers, which differ
only in which columns they treat as the step and which as metrics (table_columns.py).

This module knows the formats: which parser reads a file, how long a JSON line may be, how deep
it may nest, which shapes a JSON document may take. What a cell means (empty, NaN, text), the
same for every format, is table_cells.py's job.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from tscope.errors import UnreadableInput
from tscope.ingest import safe_json
from tscope.ingest.base import read_head
from tscope.ingest.logs.csv_arrow import (
    CSV_BLOCK_BYTES,
    parse_csv,
    wide_csv_columns,
    wide_csv_header,
    without_row_decoding_dumps,
)
from tscope.ingest.logs.json_lines_shape import arrow_table_is_bounded
from tscope.ingest.logs.table_cells import MISSING_MARKERS, ParsedTable, RecordColumns, from_arrow
from tscope.ingest.safe_fs import open_regular, read_bytes_bounded

DELIMITERS = {".csv": ",", ".tsv": "\t"}
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")
JSON_SUFFIX = ".json"
# Longest JSON Lines line parsed. A metrics line holds tens to a few thousand keys (a W&B history
# row of 10,000 keys is ~300 KB); parsing one holds ~10x its bytes (the bytes, the decoded text,
# the objects), and a 500 MB line held 2.1 GB and ended in a MemoryError. A longer line is
# skipped and counted in `partial`, as text logs cut theirs (text_logs.MAX_LINE_BYTES). A CSV
# whose line is too long for Arrow's block (csv_arrow.CSV_BLOCK_BYTES) is read again without its
# lines over this bound: one 100 MB line made the whole file "not a readable CSV".
MAX_TABLE_LINE_BYTES = 8 * 1024 * 1024


def table_format(path: Path) -> str | None:
    """ "csv", "jsonl" or "json" from the suffix; None for any other file."""
    suffix = path.suffix.lower()
    if suffix in DELIMITERS:
        return "csv"
    if suffix in JSON_LINES_SUFFIXES:
        return "jsonl"
    if suffix == JSON_SUFFIX:
        return "json"
    return None


def read_table(path: Path, display_path: str) -> ParsedTable:
    """Parse a CSV/TSV/JSONL/JSON metrics file. Raises UnreadableInput when nothing is usable."""
    kind = table_format(path)
    if kind == "csv":
        table = _read_csv(path, display_path, DELIMITERS[path.suffix.lower()])
    elif kind == "jsonl":
        table = _read_json_lines(path, display_path)
    elif kind == "json":
        table = _read_json_document(path, display_path)
    else:
        raise UnreadableInput(display_path, "not a CSV, TSV, JSONL or JSON file")
    if table.n_rows == 0:
        raise UnreadableInput(display_path, "the file holds no data rows", "Is it empty?")
    return table


def _read_csv(path: Path, display_path: str, delimiter: str) -> ParsedTable:
    malformed: list[str] = []

    def skip_malformed(row: Any) -> str:
        malformed.append(str(row.text)[:80])
        return "skip"

    import pyarrow as pa  # here: only tables need Arrow (0.1-0.4 s of a TensorBoard analyze)

    head = read_head(path, CSV_BLOCK_BYTES)
    header = wide_csv_header(path, delimiter, head)
    chosen, unread_columns = wide_csv_columns(header) if header is not None else (None, "")
    long_lines = 0
    # A column name that is not UTF-8 (one latin-1 byte) once refused the whole file: its names
    # are read with replacement characters instead, as the MLflow readers read theirs.
    mended = _utf8_header(head) is not None
    try:
        try:
            with (
                (
                    io.BytesIO(_mended(read_bytes_bounded(path, display_path)))
                    if mended
                    else open_regular(path, display_path)
                ) as handle,
                without_row_decoding_dumps(),
            ):
                arrow_table = parse_csv(handle, delimiter, skip_malformed, chosen, MISSING_MARKERS)
        except pa.ArrowInvalid as error:
            if STRADDLING_LINE not in str(error):
                raise
            # A line longer than Arrow's block: the rest of the file is read without it (and
            # without every other line over MAX_TABLE_LINE_BYTES), as JSON Lines skips them.
            data = read_bytes_bounded(path, display_path)
            kept, long_lines = _without_long_lines(_mended(data) if mended else data)
            malformed.clear()
            with without_row_decoding_dumps():
                arrow_table = parse_csv(kept, delimiter, skip_malformed, chosen, MISSING_MARKERS)
        table = from_arrow(arrow_table)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as error:
        # UnicodeDecodeError: a header that is not UTF-8 (Arrow leaves values undecoded).
        raise UnreadableInput(
            display_path, f"not a readable {'TSV' if delimiter == chr(9) else 'CSV'} ({error})"
        ) from error
    if mended:
        table.problems.append(
            "its header is not UTF-8: the column names are read with replacement characters (�)"
        )
    if long_lines:
        table.problems.append(_long_lines_problem(long_lines))
    if unread_columns:
        table.problems.append(unread_columns)
    if malformed and table.n_rows == 0:
        # Not "no data rows": every row was there, and none had the header's number of fields.
        fields = f"{len(header)} fields" if header is not None else "number of fields"
        raise UnreadableInput(
            display_path,
            f"none of its {len(malformed)} data row(s) has the header's {fields}: first "
            f"{malformed[0]!r}",
        )
    if malformed:
        table.problems.insert(
            0,
            f"{len(malformed)} malformed row(s) skipped (wrong number of fields, e.g. a line cut "
            f"off mid-write): first {malformed[0]!r}",
        )
    return table


def _utf8_header(data: bytes) -> bytes | None:
    """`data` with its first line decoded with replacement characters and encoded back as UTF-8;
    None when that line is UTF-8 already (or cut off inside a character at the end of `data`)."""
    end = data.find(b"\n")
    first = data if end < 0 else data[:end]
    try:
        first.decode("utf-8")
    except UnicodeDecodeError as error:
        if end < 0 and error.reason == "unexpected end of data":
            return None  # a head cut mid-character, not a bad byte
        return first.decode("utf-8", errors="replace").encode("utf-8") + (
            b"" if end < 0 else data[end:]
        )
    return None


def _mended(data: bytes) -> bytes:
    """`data` with a first line that is not UTF-8 re-encoded (`_utf8_header`). The whole file is
    copied (about 2x its size while parsed) only for such a header; others are streamed."""
    return _utf8_header(data) or data


def _read_json_lines(path: Path, display_path: str) -> ParsedTable:
    try:
        data = read_bytes_bounded(path, display_path)  # regular files only (safe_fs)
    except OSError as error:
        raise UnreadableInput(display_path, f"cannot open the file ({error})") from error
    # Fast path: Arrow's JSON reader (also takes NaN/Infinity literals). It refuses a key whose
    # type changes, nested lists or a cut-off last line; those files go through Python's json.
    # Arrow recurses on nesting and crashes the process (SIGSEGV) on a 50,000-deep array, so it
    # only sees files whose every line nests at most MAX_JSON_DEPTH deep (a C-speed pre-scan).
    # It also builds a dense column per key: a sparse, wide file goes the stdlib way instead.
    if (
        _lines_are_short(data)
        and safe_json.depth_over_limit(data) is None
        and arrow_table_is_bounded(data)
    ):
        import pyarrow as pa
        import pyarrow.json as pa_json

        try:
            return from_arrow(pa_json.read_json(pa.BufferReader(data)))
        except (pa.ArrowException, OSError, UnicodeDecodeError):
            pass  # UnicodeDecodeError: a key that is not UTF-8; Python's json replaces the bytes
    columns = RecordColumns()
    malformed = long_lines = 0
    first_malformed = ""
    for line_number, line in enumerate(_lines(data), start=1):
        if line is None:  # skipped as a malformed line is: no row
            long_lines += 1
            continue
        record = _parse_line(line)
        if isinstance(record, dict):
            columns.add(record)
        elif record is not _BLANK:
            malformed += 1
            first_malformed = first_malformed or f"line {line_number}"
    del data  # the file's bytes: the columns hold what was read
    if not columns.n_rows and long_lines:
        raise UnreadableInput(display_path, _long_lines_problem(long_lines))
    if not columns.n_rows and malformed:
        raise UnreadableInput(display_path, "no line is a JSON object", "Is it JSON Lines?")
    table = columns.finish()
    if malformed:
        table.problems.insert(
            0,
            f"{malformed} line(s) that are not a JSON object skipped (first at {first_malformed}; "
            "a cut-off last line or one nested too deep means it was damaged)",
        )
    if long_lines:
        table.problems.insert(0, _long_lines_problem(long_lines))
    return table


def _long_lines_problem(count: int) -> str:
    return (
        f"{count} line(s) longer than {MAX_TABLE_LINE_BYTES // (1024 * 1024)} MiB skipped (no "
        "metrics logger writes such lines; the file is damaged or crafted)"
    )


_BLANK = object()  # an empty line: neither a record nor a malformed line
# What Arrow's CSV reader says of a line longer than its block (csv_arrow.CSV_BLOCK_BYTES).
STRADDLING_LINE = "straddl"


def _without_long_lines(data: bytes) -> tuple[io.BytesIO, int]:
    """The file's bytes without its lines over MAX_TABLE_LINE_BYTES, and how many there were."""
    kept = io.BytesIO()
    skipped = 0
    for line in _lines(data):
        if line is None:
            skipped += 1
        else:
            kept.write(line)
    kept.seek(0)
    return kept, skipped


def _lines_are_short(data: bytes) -> bool:
    """Whether every aligned MAX_TABLE_LINE_BYTES window of the file holds a line break, so that
    no line is longer than twice that: pyarrow gets no file with a huge line. C-speed finds."""
    return all(
        data.find(b"\n", start, start + MAX_TABLE_LINE_BYTES) >= 0
        for start in range(0, len(data) - MAX_TABLE_LINE_BYTES + 1, MAX_TABLE_LINE_BYTES)
    )


def _lines(data: bytes) -> Iterator[bytes | None]:
    """The lines of the file (with their line break), None for one longer than
    MAX_TABLE_LINE_BYTES: such a line is never copied out of the file's bytes."""
    start, size = 0, len(data)
    while start < size:
        end = data.find(b"\n", start)
        stop = size if end < 0 else end + 1
        yield data[start:stop] if stop - start <= MAX_TABLE_LINE_BYTES else None
        start = stop


def _parse_line(line: bytes) -> Any:
    """One line as JSON: the record, _BLANK for an empty line, or None when it is not JSON."""
    # Counting brackets is a cheap upper bound of the nesting; only lines above it pay the
    # exact check, and a line nested deeper than safe_json allows is malformed.
    if (
        line.count(b"[") + line.count(b"{") > safe_json.MAX_JSON_DEPTH
        and safe_json.depth_over_limit(line) is not None
    ):
        return None
    try:
        return json.loads(line)  # bytes: json detects UTF-8 and a BOM itself
    except (ValueError, RecursionError):  # JSONDecodeError, UnicodeDecodeError, huge ints
        if not line.strip():
            return _BLANK
        return _loads_lenient(line)


def _loads_lenient(line: bytes) -> Any:
    """A line with bytes that are not UTF-8: replace them and try again; None if still bad."""
    try:
        return json.loads(line.decode("utf-8-sig", errors="replace"))
    except (ValueError, RecursionError):
        return None


def _read_json_document(path: Path, display_path: str) -> ParsedTable:
    try:
        data = read_bytes_bounded(path, display_path)
    except OSError as error:
        raise UnreadableInput(display_path, f"cannot open the file ({error})") from error
    # Bytes that are not UTF-8 are replaced, as a line of a JSON Lines file is.
    document = safe_json.loads(data.decode("utf-8-sig", errors="replace"), display_path)
    records = records_from_json(document)
    if records is None:
        raise UnreadableInput(
            display_path,
            "not a table: expected a list of records or a mapping of columns",
        )
    columns = RecordColumns()
    for record in records:
        columns.add(record)
    return columns.finish()


def records_from_json(document: Any) -> list[Any] | None:
    """Rows of a JSON table: a list of records, `{col: [values]}` or pandas' `{col: {row: v}}`."""
    if isinstance(document, list):
        return document
    if not isinstance(document, dict) or not document:
        return None
    columns = list(document.values())
    if all(isinstance(column, list) for column in columns):
        length = max(len(column) for column in columns)
        return [
            {key: column[row] for key, column in document.items() if row < len(column)}
            for row in range(length)
        ]
    if all(isinstance(column, dict) for column in columns):
        rows: dict[str, dict[str, Any]] = {}
        for key, column in document.items():
            for row_label, value in column.items():
                rows.setdefault(str(row_label), {})[key] = value
        return list(rows.values())
    return None
