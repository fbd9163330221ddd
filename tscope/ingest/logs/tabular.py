"""Metric tables in CSV, TSV, JSON Lines and JSON, parsed fast into aligned numeric columns.

Shared by the generic metrics-table reader and the W&B export and history readers, which differ
only in which columns they treat as the step and which as metrics (table_columns.py).

Cell rules, the same for every format:
  * an empty cell (or NA/null/None) means "not logged at this step": no row is emitted, no zero;
  * "nan", "NaN", "inf", "-Infinity" are values: the row is kept with NaN/Inf as logged;
  * any other text in a numeric column is skipped and counted in `ParsedTable.problems`;
  * a column where most non-empty cells are text (run ids, dates) is not a metric and is ignored.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from tscope.errors import UnreadableInput
from tscope.ingest import safe_json
from tscope.ingest.logs.csv_arrow import parse_csv, wide_csv_header, without_row_decoding_dumps
from tscope.ingest.logs.json_lines_shape import MAX_DENSE_PER_CELL, arrow_table_is_bounded
from tscope.ingest.logs.series_cap import columns_to_read
from tscope.ingest.safe_fs import open_regular, read_bytes_bounded

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

DELIMITERS = {".csv": ",", ".tsv": "\t"}
JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")
JSON_SUFFIX = ".json"
# Cells that mean "no value here". pandas and W&B write missing values as empty cells.
MISSING_MARKERS = ("", "NA", "N/A", "n/a", "null", "NULL", "None", "none", "<NA>", "#N/A")
_MISSING_SET = frozenset(MISSING_MARKERS)
# Spellings of a logged NaN (Python's str(float("nan")), numpy, C printf, JSON extensions).
_NAN_SPELLINGS = frozenset({"nan", "-nan", "+nan"})
# Longest JSON Lines line parsed. A metrics line holds tens to a few thousand keys (a W&B history
# row of 10,000 keys is ~300 KB); parsing one holds ~10x its bytes (the bytes, the decoded text,
# the objects), and a 500 MB line held 2.1 GB and ended in a MemoryError. A longer line is
# skipped and counted in `partial`, as text logs cut theirs (text_logs.MAX_LINE_BYTES).
MAX_JSON_LINE_BYTES = 8 * 1024 * 1024
# A string value longer than this is not a number (float() would copy and scan all of it).
_LONGEST_NUMBER_TEXT = 100
# A column is a metric when more than this share of its non-empty cells are numbers; below it the
# column is text (run ids, dates) and a stray number in it is not a measurement.
NUMERIC_COLUMN_MIN_SHARE = 0.5


@dataclass
class ParsedTable:
    """Numeric columns of one file, row-aligned. Text columns are left out."""

    names: list[str] = field(default_factory=list)  # numeric columns, file order, unique
    values: dict[str, np.ndarray] = field(default_factory=dict)  # (n_rows,) float64
    present: dict[str, np.ndarray] = field(default_factory=dict)  # (n_rows,) bool: cell logged
    n_rows: int = 0
    problems: list[str] = field(default_factory=list)  # skipped rows and cells, for `partial`


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

    header = wide_csv_header(path, delimiter)
    chosen = columns_to_read(header) if header is not None else None
    try:
        with open_regular(path, display_path) as handle, without_row_decoding_dumps():
            arrow_table = parse_csv(handle, delimiter, skip_malformed, chosen, MISSING_MARKERS)
        table = _from_arrow(arrow_table)
    except (pa.ArrowException, OSError, UnicodeDecodeError) as error:
        # UnicodeDecodeError: a header that is not UTF-8 (Arrow leaves values undecoded).
        raise UnreadableInput(
            display_path, f"not a readable {'TSV' if delimiter == chr(9) else 'CSV'} ({error})"
        ) from error
    if header is not None and chosen is not None:
        table.problems.append(
            f"{len(header) - len(chosen)} of its {len(header)} columns not read: tscope reads at "
            f"most {len(chosen)} columns of a table (the step and loss-like ones first)"
        )
    if malformed:
        table.problems.insert(
            0,
            f"{len(malformed)} malformed row(s) skipped (wrong number of fields, e.g. a line cut "
            f"off mid-write): first {malformed[0]!r}",
        )
    return table


def _from_arrow(arrow_table: pa.Table) -> ParsedTable:
    import pyarrow as pa

    table = ParsedTable(n_rows=arrow_table.num_rows)
    for index, name in enumerate(arrow_table.column_names):
        if name in table.values or not name.strip():
            continue  # a repeated header keeps its first column
        column = arrow_table.column(index)
        if pa.types.is_integer(column.type) or pa.types.is_floating(column.type):
            values, present = _float_column(column)
            _add_column(table, name, np.where(present, values, np.nan), present)
        elif pa.types.is_string(column.type) or pa.types.is_large_string(column.type):
            raw = column.cast(pa.large_binary()).to_pandas()
            texts = raw.str.decode("utf-8", errors="replace")
            _add_text_column(table, name, texts)
        # bool, timestamp, struct, list and all-null columns are not metrics.
    return table


def _float_column(column: pa.ChunkedArray) -> tuple[np.ndarray, np.ndarray]:
    """(the values as float64, which cells are not null), read from Arrow's buffers: Arrow's own
    to_numpy imports pandas (~1 s of a logs-only analyze's startup)."""
    import pyarrow as pa

    array = column.combine_chunks().cast(pa.float64())
    size = len(array)
    if size == 0:
        return np.empty(0, dtype=np.float64), np.zeros(0, dtype=bool)
    validity, data = array.buffers()
    values = np.frombuffer(data, dtype=np.float64, count=size, offset=array.offset * 8)
    if validity is None or array.null_count == 0:
        return values, np.ones(size, dtype=bool)
    bits = np.unpackbits(np.frombuffer(validity, dtype=np.uint8), bitorder="little")
    return values, bits[array.offset : array.offset + size].astype(bool)


def _add_column(table: ParsedTable, name: str, values: np.ndarray, present: np.ndarray) -> None:
    table.names.append(name)
    table.values[name] = np.asarray(values, dtype=np.float64)
    table.present[name] = np.asarray(present, dtype=bool)


def _add_text_column(table: ParsedTable, name: str, texts: pd.Series) -> None:
    """A column with text in it: numbers where they parse, the rest counted as problems."""
    import pandas as pd  # here: only text cells need it, a numeric CSV does not

    stripped = texts.astype("object").where(texts.notna(), "").astype(str).str.strip()
    missing = stripped.isin(_MISSING_SET).to_numpy()
    numbers = pd.to_numeric(stripped.where(~missing, "nan"), errors="coerce").to_numpy(np.float64)
    nan_spelled = stripped.str.lower().isin(_NAN_SPELLINGS).to_numpy()
    bad = ~missing & np.isnan(numbers) & ~nan_spelled
    present = ~missing & ~bad
    filled = int((~missing).sum())
    if filled == 0 or present.sum() <= NUMERIC_COLUMN_MIN_SHARE * filled:
        return
    _add_column(table, name, numbers, present)
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        table.problems.append(
            f"column {name!r}: {int(bad.sum())} non-numeric cell(s) skipped "
            f"(first {str(stripped.iat[first])[:40]!r} in data row {first + 1})"
        )


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
            return _from_arrow(pa_json.read_json(pa.BufferReader(data)))
        except (pa.ArrowException, OSError, UnicodeDecodeError):
            pass  # UnicodeDecodeError: a key that is not UTF-8; Python's json replaces the bytes
    columns = _RecordColumns()
    malformed = long_lines = 0
    first_malformed = ""
    for line_number, line in enumerate(_json_lines(data), start=1):
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
        f"{count} line(s) longer than {MAX_JSON_LINE_BYTES // (1024 * 1024)} MiB skipped (no "
        "metrics logger writes such lines; the file is damaged or crafted)"
    )


_BLANK = object()  # an empty line: neither a record nor a malformed line


def _lines_are_short(data: bytes) -> bool:
    """Whether every aligned MAX_JSON_LINE_BYTES window of the file holds a line break, so that
    no line is longer than twice that: pyarrow gets no file with a huge line. C-speed finds."""
    return all(
        data.find(b"\n", start, start + MAX_JSON_LINE_BYTES) >= 0
        for start in range(0, len(data) - MAX_JSON_LINE_BYTES + 1, MAX_JSON_LINE_BYTES)
    )


def _json_lines(data: bytes) -> Iterator[bytes | None]:
    """The lines of the file (with their line break), None for one longer than
    MAX_JSON_LINE_BYTES: such a line is never copied out of the file's bytes."""
    start, size = 0, len(data)
    while start < size:
        end = data.find(b"\n", start)
        stop = size if end < 0 else end + 1
        yield data[start:stop] if stop - start <= MAX_JSON_LINE_BYTES else None
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
    columns = _RecordColumns()
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


# Python ints inside this range convert to float without overflow.
_FLOAT_SAFE_INT = 2**1000


class _RecordColumns:
    """Columns built from JSON records one at a time. A record that is not a dict is a row
    without values. Runs per value on a million-line file, hence the inline fast path."""

    def __init__(self) -> None:
        # key -> (rows with a number, the numbers, rows with something else)
        self.cells: dict[str, tuple[list[int], list[float], list[int]]] = {}
        self.bad_examples: dict[str, str] = {}
        self.n_rows = 0

    def add(self, record: Any) -> None:
        row = self.n_rows
        self.n_rows += 1
        if not isinstance(record, dict):
            return
        for key, value in record.items():
            cell = self.cells.get(key)
            if cell is None:
                cell = self.cells[key] = ([], [], [])
            kind = type(value)
            if kind is float:
                cell[0].append(row)
                cell[1].append(value)
            elif kind is int and -_FLOAT_SAFE_INT < value < _FLOAT_SAFE_INT:
                cell[0].append(row)
                cell[1].append(float(value))
            elif (number := _json_number(value)) is not None:
                cell[0].append(row)
                cell[1].append(number)
            elif not _is_missing(value):
                cell[2].append(row)
                shown = value[:40] if isinstance(value, str) else value  # no copy of a long text
                self.bad_examples.setdefault(str(key), repr(shown)[:40])

    def finish(self) -> ParsedTable:
        table = ParsedTable(n_rows=self.n_rows)
        kept, left_out = self._densified_columns()
        for name, (rows, values, bad_rows) in self.cells.items():
            filled = len(rows) + len(bad_rows)
            if not rows or len(rows) <= NUMERIC_COLUMN_MIN_SHARE * filled or name not in kept:
                continue
            present = np.zeros(self.n_rows, dtype=bool)
            column = np.full(self.n_rows, np.nan)
            present[rows] = True
            column[rows] = values
            _add_column(table, str(name), column, present)
            if bad_rows:
                table.problems.append(
                    f"column {name!r}: {len(bad_rows)} non-numeric value(s) skipped "
                    f"(first {self.bad_examples[str(name)]} in record {bad_rows[0] + 1})"
                )
        if left_out:
            table.problems.append(
                f"{left_out} sparse column(s) left out: the file has too many keys logged too "
                "rarely to be a metrics log (the most-logged columns are kept)"
            )
        return table

    def _densified_columns(self) -> tuple[set[str], int]:
        """The columns made dense (n_rows each), most-logged first, while the dense cells stay
        within MAX_DENSE_PER_CELL times the cells logged: memory proportional to the file even
        when each line brings a new key. Returns (kept names, how many were left out)."""
        logged = sum(len(rows) for rows, _, _ in self.cells.values())
        budget = max(1_000_000, MAX_DENSE_PER_CELL * logged)
        by_count = sorted(self.cells, key=lambda name: -len(self.cells[name][0]))
        most = max(1, budget // max(self.n_rows, 1))
        return set(by_count[:most]), max(0, len(by_count) - most)


def _json_number(value: Any) -> float | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        try:
            return float(value)
        except OverflowError:  # an integer beyond float range
            return None
    if isinstance(value, str) and len(value) <= _LONGEST_NUMBER_TEXT:
        try:
            return float(value)
        except ValueError:
            return None
    return None


def _is_missing(value: Any) -> bool:
    return value is None or (
        isinstance(value, str)
        and len(value) <= _LONGEST_NUMBER_TEXT
        and value.strip() in _MISSING_SET
    )
