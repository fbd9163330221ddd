"""Cell rules: how parsed cells become a ParsedTable's numeric columns, the same for every format.

  * an empty cell (or NA/null/None) means "not logged at this step": no row is emitted, no zero;
  * "nan", "NaN", "inf", "-Infinity" are values: the row is kept with NaN/Inf as logged;
  * any other text in a numeric column is skipped and counted in `ParsedTable.problems`;
  * a column where most non-empty cells are text (run ids, dates) is not a metric and is ignored.

Cells come from Arrow columns (a CSV, or a JSON Lines file Arrow could read) or from JSON records
added one at a time (RecordColumns). Kept apart from tabular.py, which knows the file formats
(which parser, line lengths, nesting, the table shapes of a JSON document): this module sees
only cells.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tscope.ingest.logs.json_lines_shape import MAX_DENSE_PER_CELL

if TYPE_CHECKING:
    import pandas as pd
    import pyarrow as pa

# Cells that mean "no value here". pandas and W&B write missing values as empty cells.
MISSING_MARKERS = ("", "NA", "N/A", "n/a", "null", "NULL", "None", "none", "<NA>", "#N/A")
_MISSING_SET = frozenset(MISSING_MARKERS)
# Spellings of a logged NaN (Python's str(float("nan")), numpy, C printf, JSON extensions).
_NAN_SPELLINGS = frozenset({"nan", "-nan", "+nan"})
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
    # Rows that repeat the header (a cell equal to its column's name): a CSV logger that opens
    # its file again after a restart writes the header again there.
    header_rows: set[int] = field(default_factory=set)


def from_arrow(arrow_table: pa.Table) -> ParsedTable:
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
    header_again = (stripped == name.strip()).to_numpy()
    table.header_rows.update(int(row) for row in np.flatnonzero(header_again))
    missing = missing | header_again
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


# Python ints inside this range convert to float without overflow.
_FLOAT_SAFE_INT = 2**1000


class RecordColumns:
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
