"""Which column of a metrics table is what: sniff the header, find the step, go long-form.

`sniff_columns` is what the readers' `can_read` use (the first bytes only); `to_long_form` turns
a `ParsedTable` (see table_cells.py) into the long-form metric table every reader returns.
"""

from __future__ import annotations

import csv
import re
from pathlib import Path

import numpy as np

from tscope.errors import UnreadableInput
from tscope.ingest import safe_json
from tscope.ingest.base import read_head
from tscope.ingest.logs.names import canonical_metrics, metric_preference
from tscope.ingest.logs.table_cells import ParsedTable
from tscope.ingest.logs.tabular import DELIMITERS, table_format
from tscope.model import MetricTable, TextColumn

# Enough for the header of any real export (W&B exports of many runs have long headers).
SNIFF_BYTES = 65536
# Integral floats above this lose integer precision; steps never get near it.
_MAX_STEP = 2.0**53
# Wall-clock bookkeeping (train_time_ms, _runtime, _timestamp, "Wall Time", step_time): logged
# next to metrics but not training signals; a monotonic clock must not pose as a metric.
_BOOKKEEPING = re.compile(
    r"(^|[^a-z])(wall_?time|time|timestamp|runtime|elapsed|date|datetime|clock)"
    r"(_?(ms|s|sec|secs|seconds|us|ns|min|h))?$"
)
# pandas names an unnamed index column "Unnamed: 0" when it reads a CSV written with the index.
_UNNAMED_INDEX = re.compile(r"^unnamed: \d+$", re.IGNORECASE)


def sniff_columns(path: Path) -> list[str] | None:
    """Column names (CSV header) or keys (first JSON record) from the first bytes; None if none."""
    kind = table_format(path)
    if kind is None:
        return None
    head = read_head(path, SNIFF_BYTES).lstrip(b"\xef\xbb\xbf").decode("utf-8", errors="replace")
    if kind == "csv":
        first_line = head.splitlines()[0] if head.strip() else ""
        if not first_line:
            return None
        try:
            return next(csv.reader([first_line], delimiter=DELIMITERS[path.suffix.lower()]))
        except (csv.Error, StopIteration):
            return None
    if kind == "jsonl":
        for line in head.splitlines():
            if line.strip():
                return _keys_of_line(line)
        return None
    return _keys_of_json_head(head)


def _keys_of_line(line: str) -> list[str] | None:
    try:
        record = safe_json.loads(line, "the first line")
    except UnreadableInput:  # not JSON, or nested past any record (a RecursionError in json)
        return None
    return [str(key) for key in record] if isinstance(record, dict) else None


# A quoted key followed by a colon, for peeking into the first record of a large JSON file.
_JSON_KEY = re.compile(r'"((?:[^"\\]|\\.){1,200})"\s*:\s*(.)')


def _keys_of_json_head(head: str) -> list[str] | None:
    """Keys of a list of records (`[{...}, ...]`) or of a column mapping (`{"step": [...]}`)."""
    text = head.lstrip()
    if text.startswith("["):
        if not text[1:].lstrip().startswith("{"):
            return None
        return list(dict.fromkeys(match.group(1) for match in _JSON_KEY.finditer(text)))
    if text.startswith("{"):
        # Columns orientation: every top-level value is a list or a {row: value} mapping. A
        # summary or config file (`{"_step": 9, ...}`) has scalar values and is not a table.
        first = _JSON_KEY.search(text)
        if first is None or first.group(2) not in "[{":
            return None
        return list(
            dict.fromkeys(m.group(1) for m in _JSON_KEY.finditer(text) if m.group(2) in "[{")
        )
    return None


def find_column(names: list[str], candidates: tuple[str, ...]) -> str | None:
    """The first of `candidates` (case-insensitive) that names a column, in candidate order."""
    by_lower: dict[str, str] = {}
    for name in names:
        by_lower.setdefault(name.strip().lower(), name)
    for candidate in candidates:
        if candidate.lower() in by_lower:
            return by_lower[candidate.lower()]
    return None


def is_bookkeeping_column(name: str) -> bool:
    """Wall-clock columns and unnamed index columns: kept out of the metric table."""
    key = re.sub(r"[\s\-]+", "_", name.strip().lower())
    return not key or bool(_UNNAMED_INDEX.match(name.strip())) or bool(_BOOKKEEPING.search(key))


def usable_steps(table: ParsedTable, step_column: str) -> tuple[np.ndarray, np.ndarray]:
    """(steps as int64, mask of rows whose step is a finite integral number)."""
    raw = table.values[step_column]
    with np.errstate(invalid="ignore"):
        usable = (
            table.present[step_column]
            & np.isfinite(raw)
            & (np.abs(raw) < _MAX_STEP)
            & (raw == np.floor(raw))
        )
    return np.where(usable, raw, 0).astype(np.int64), usable


def to_long_form(
    table: ParsedTable,
    step_column: str,
    metrics: list[tuple[str, str]],
    display_path: str,
) -> tuple[MetricTable, list[str]]:
    """The long-form metric table for (column, metric name) pairs, plus problems with steps.

    Rows stay in file order (`order` = row x columns + column): duplicate and backwards steps are
    the assembly's to resolve.
    """
    steps, usable = usable_steps(table, step_column)
    problems: list[str] = []
    any_value = np.zeros(table.n_rows, dtype=bool)
    for column, _ in metrics:
        any_value |= table.present[column]
    unusable = any_value & ~usable
    if unusable.any():
        problems.append(
            f"{int(unusable.sum())} row(s) with values but no usable step in {step_column!r} "
            "(missing, not a number or not an integer) skipped"
        )
    parts_steps, parts_values, parts_order, parts_pair = [], [], [], []
    for index, (column, _) in enumerate(metrics):
        rows = np.flatnonzero(table.present[column] & usable)
        if rows.size == 0:
            continue
        parts_steps.append(steps[rows])
        parts_values.append(table.values[column][rows])
        parts_order.append(rows.astype(np.int64) * len(metrics) + index)
        parts_pair.append(np.full(rows.size, index, dtype=np.int32))
    if not parts_steps:
        return MetricTable.no_rows(), problems
    pair_index = np.concatenate(parts_pair)  # (n_points,) index into `metrics`
    frame = MetricTable(
        np.concatenate(parts_steps),
        TextColumn(pair_index, [metric for _, metric in metrics]),
        np.concatenate(parts_values),
        display_path,
        TextColumn(pair_index, [column for column, _ in metrics]),
        np.concatenate(parts_order),
    )
    return frame, problems


def canonical_column_names(columns: list[str]) -> list[tuple[str, str]]:
    """(column, metric name) for the metric columns one table logs together."""
    return unique_metric_names(list(zip(columns, canonical_metrics(columns), strict=True)))


def unique_metric_names(
    pairs: list[tuple[str, str]],
    duplicate: str = "column",
    spellings: list[str] | None = None,
) -> list[tuple[str, str]]:
    """(column, canonical) pairs renamed so that no two columns share a metric name.

    Two columns that map to one canonical name (`loss` and `train/loss`) are two series; merging
    them would interleave values from different sources. The column `metric_preference` ranks
    best takes the canonical name (the canonical spelling over other spellings, a producer's
    step-level series over its summaries or parts); ties go to the first column. The others keep
    their own names, numbered (`duplicate` and the position) when the name is already taken.
    `spellings`: the metric's own name per pair, ranked instead of the column when the column
    wraps it (a W&B UI export's `<run> - <metric>`).
    """
    best: dict[str, tuple[int, int]] = {}
    for index, (column, canonical) in enumerate(pairs):
        rank = (metric_preference(spellings[index] if spellings else column), index)
        if canonical not in best or rank < best[canonical]:
            best[canonical] = rank
    winners = {index for _, index in best.values()}
    used = {pairs[index][1] for index in winners}
    unique = []
    for index, (column, canonical) in enumerate(pairs):
        name = canonical
        if index not in winners:
            own = column.strip()
            name = own if own not in used else f"{own} ({duplicate} {index + 1})"
            used.add(name)
        unique.append((column, name))
    return unique
