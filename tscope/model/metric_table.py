"""The long-form metric table as numpy columns: what every reader returns and a Run holds.

One row per logged point, the columns of METRIC_COLUMNS. The three text columns (metric, source,
original name) are stored as codes into a short tuple of distinct labels: a log repeats a handful
of names a million times, and codes make the split by metric, the merge of files and the sort
cheap. numpy only, so that a logs-only analyze never imports pandas (issue 15: pandas was ~40% of
the startup); `to_frame()` gives a pandas DataFrame to the code and tests that want one.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING, overload

import numpy as np

if TYPE_CHECKING:
    import pandas as pd

# The one normalized shape every reader produces: one row per logged point.
#   step           int64   optimizer step as the run logged it
#   metric         str     canonical name, e.g. "train/loss"
#   value          float64 NaN/Inf kept as logged; never filled
#   source         str     path of the file the row came from (relative to the run root)
#   original_name  str     the name the producer used, e.g. "lm loss"
#   order          int64   position of the row within its source, so "last logged wins" is exact
METRIC_COLUMNS = ("step", "metric", "value", "source", "original_name", "order")
_TEXT_COLUMNS = ("metric", "source", "original_name")


class TextColumn:
    """A column of strings as codes (intp) into distinct labels."""

    __slots__ = ("codes", "labels")

    def __init__(self, codes: np.ndarray, labels: Sequence[str]) -> None:
        labels = tuple(labels)
        codes = np.asarray(codes, dtype=np.intp)
        if len(set(labels)) != len(labels):
            # Equal labels must share a code: grouping and sorting compare codes.
            first: dict[str, int] = {}
            remap = np.asarray([first.setdefault(label, len(first)) for label in labels])
            codes = remap[codes] if codes.size else codes
            labels = tuple(first)
        self.codes = codes
        self.labels = labels

    @classmethod
    def _derived(cls, codes: np.ndarray, labels: tuple[str, ...]) -> TextColumn:
        """A column sharing a checked column's labels (a slice, a gather, a concatenation of
        columns with the same labels): nothing to validate or copy. Checking them again made
        every slice cost the number of labels, and splitting a table of 100,000 series into
        its first 1,000 cost 10^8 steps."""
        column = cls.__new__(cls)
        column.codes = codes if codes.dtype == np.intp else codes.astype(np.intp)
        column.labels = labels
        return column

    @classmethod
    def of_texts(cls, texts: Iterable[str]) -> TextColumn:
        """Codes numbered in order of first appearance."""
        first: dict[str, int] = {}
        codes = [first.setdefault(text, len(first)) for text in texts]
        return cls(np.asarray(codes, dtype=np.intp), tuple(first))

    @classmethod
    def constant(cls, text: str, size: int) -> TextColumn:
        return cls(np.zeros(size, dtype=np.intp), (text,))

    def __len__(self) -> int:
        return int(self.codes.size)

    def texts(self) -> np.ndarray:
        """The strings as an object array (one per row)."""
        texts: np.ndarray = np.asarray(self.labels, dtype=object)[self.codes]
        return texts

    def take(self, indices: np.ndarray) -> TextColumn:
        return TextColumn._derived(self.codes[indices], self.labels)

    def rows_between(self, first: int, stop: int) -> TextColumn:
        """Rows first..stop-1, a view of the codes."""
        return TextColumn._derived(self.codes[first:stop], self.labels)

    def without_unused_labels(self) -> TextColumn:
        """The same texts with only the labels some row holds (codes renumbered, label order
        kept): a table cut to a few series no longer carries every name of the file."""
        if not self.labels:
            return self
        held = np.bincount(self.codes, minlength=len(self.labels)) > 0
        if held.all():
            return self
        renumber = np.cumsum(held, dtype=np.intp) - 1
        labels = tuple(
            label for label, is_held in zip(self.labels, held.tolist(), strict=True) if is_held
        )
        return TextColumn._derived(renumber[self.codes] if self.codes.size else self.codes, labels)

    def at(self, row: int) -> str:
        return self.labels[int(self.codes[row])]

    def used_labels(self) -> list[str]:
        """The labels some row holds, in label order."""
        # A count per label, O(rows): np.unique sorts or hashes every row (seconds for 10^6 rows,
        # and the analyzers ask for the metric names several times).
        held = np.bincount(self.codes, minlength=len(self.labels)) > 0
        return [label for label, is_held in zip(self.labels, held.tolist(), strict=True) if is_held]

    def sorted_codes(self) -> tuple[np.ndarray, list[str]]:
        """(codes renumbered so that their order is the labels' sorted order, sorted labels)."""
        used = self.used_labels()
        ranked = sorted(used)
        rank = np.zeros(len(self.labels), dtype=np.intp)
        position = {label: index for index, label in enumerate(ranked)}
        for code, label in enumerate(self.labels):
            rank[code] = position.get(label, 0)
        return (rank[self.codes] if self.codes.size else self.codes), ranked

    @staticmethod
    def concat(columns: Sequence[TextColumn]) -> TextColumn:
        if len(columns) == 1:
            return columns[0]
        labels = columns[0].labels
        if all(column.labels is labels or column.labels == labels for column in columns):
            return TextColumn._derived(np.concatenate([column.codes for column in columns]), labels)
        merged: dict[str, int] = {}
        parts = []
        for column in columns:
            remap = np.asarray(
                [merged.setdefault(label, len(merged)) for label in column.labels], dtype=np.intp
            )
            parts.append(remap[column.codes] if column.codes.size else column.codes)
        return TextColumn(np.concatenate(parts), tuple(merged))


TextInput = TextColumn | str | Sequence[str]


def _is_consecutive(indices: np.ndarray, size: int) -> bool:
    """Whether the row indices are first, first + 1, …, last, all within the table's `size`
    rows (at least one; an index out of range is left to numpy's error)."""
    if indices.size == 0:
        return False
    first, last = int(indices[0]), int(indices[-1])
    if first < 0 or last >= size or last - first != indices.size - 1:
        return False
    return bool(np.all(np.diff(indices) == 1))


class MetricTable:
    """METRIC_COLUMNS as numpy arrays, row-aligned. Not modified in place once built."""

    __slots__ = ("metric", "order", "original_name", "source", "step", "value")

    def __init__(
        self,
        step: np.ndarray,
        metric: TextInput,
        value: np.ndarray,
        source: TextInput,
        original_name: TextInput,
        order: np.ndarray,
    ) -> None:
        self.step = np.asarray(step, dtype=np.int64)
        self.value = np.asarray(value, dtype=np.float64)
        self.order = np.asarray(order, dtype=np.int64)
        size = self.step.size
        self.metric = _text(metric, size)
        self.source = _text(source, size)
        self.original_name = _text(original_name, size)
        if not (self.value.size == self.order.size == size) or any(
            len(column) != size for column in (self.metric, self.source, self.original_name)
        ):
            raise ValueError("the columns of a metric table must have one length")

    @classmethod
    def no_rows(cls) -> MetricTable:
        none = np.empty(0, dtype=np.int64)
        return cls(none, (), np.empty(0, dtype=np.float64), (), (), none)

    @classmethod
    def from_frame(cls, frame: pd.DataFrame) -> MetricTable:
        """A DataFrame with METRIC_COLUMNS (the readers that build one with pandas)."""
        if frame.empty:
            return cls.no_rows()
        return cls(
            frame["step"].to_numpy(np.int64),
            TextColumn.of_texts(str(text) for text in frame["metric"].tolist()),
            frame["value"].to_numpy(np.float64),
            TextColumn.of_texts(str(text) for text in frame["source"].tolist()),
            TextColumn.of_texts(str(text) for text in frame["original_name"].tolist()),
            frame["order"].to_numpy(np.int64),
        )

    @staticmethod
    def concat(tables: Sequence[MetricTable]) -> MetricTable:
        if not tables:
            return MetricTable.no_rows()
        if len(tables) == 1:
            return tables[0]
        return MetricTable(
            np.concatenate([table.step for table in tables]),
            TextColumn.concat([table.metric for table in tables]),
            np.concatenate([table.value for table in tables]),
            TextColumn.concat([table.source for table in tables]),
            TextColumn.concat([table.original_name for table in tables]),
            np.concatenate([table.order for table in tables]),
        )

    def __len__(self) -> int:
        return int(self.step.size)

    @property
    def empty(self) -> bool:
        return self.step.size == 0

    @property
    def columns(self) -> list[str]:
        return list(METRIC_COLUMNS)

    @overload
    def __getitem__(self, key: str) -> np.ndarray: ...
    @overload
    def __getitem__(self, key: np.ndarray) -> MetricTable: ...
    def __getitem__(self, key: str | np.ndarray) -> np.ndarray | MetricTable:
        """A column as an array (text as an object array), or the rows a mask/indices select."""
        if isinstance(key, str):
            if key in _TEXT_COLUMNS:
                column: TextColumn = getattr(self, key)
                return column.texts()
            if key not in METRIC_COLUMNS:
                raise KeyError(key)
            array: np.ndarray = getattr(self, key)
            return array
        return self.take(key)

    def take(self, rows: np.ndarray) -> MetricTable:
        """The rows a boolean mask or an index array selects, in that order."""
        rows = np.asarray(rows)
        indices = np.flatnonzero(rows) if rows.dtype == bool else rows.astype(np.intp)
        if _is_consecutive(indices, len(self)):
            # Most of an assembly's selections are one stretch of rows (a metric's rows of a
            # wide table, a series with no step logged twice): views, not six copied columns.
            return self.rows_between(int(indices[0]), int(indices[-1]) + 1)
        return MetricTable(
            self.step[indices],
            self.metric.take(indices),
            self.value[indices],
            self.source.take(indices),
            self.original_name.take(indices),
            self.order[indices],
        )

    def rows_between(self, first: int, stop: int) -> MetricTable:
        """Rows first..stop-1 as views of this table's columns (it is never modified in place)."""
        return MetricTable(
            self.step[first:stop],
            self.metric.rows_between(first, stop),
            self.value[first:stop],
            self.source.rows_between(first, stop),
            self.original_name.rows_between(first, stop),
            self.order[first:stop],
        )

    def without_unused_labels(self) -> MetricTable:
        """The same rows, the text columns holding only the labels some row uses: after the
        series cap cut a table of 100,000 names to 1,000, what follows pays for 1,000."""
        return MetricTable(
            self.step,
            self.metric.without_unused_labels(),
            self.value,
            self.source.without_unused_labels(),
            self.original_name.without_unused_labels(),
            self.order,
        )

    def sorted_by(self, *keys: str) -> MetricTable:
        """The rows sorted (stable) by the columns named, the first the primary key: this table
        itself when they already are (a reader's rows in file order, one metric's steps)."""
        if _in_order(self._sort_columns(keys)):
            return self
        return self.take(self.sort_order(*keys))

    def _sort_columns(self, keys: Sequence[str]) -> list[np.ndarray]:
        columns = []
        for key in keys:
            if key in _TEXT_COLUMNS:
                column: TextColumn = getattr(self, key)
                columns.append(column.sorted_codes()[0])
            else:
                columns.append(self[key])
        return columns

    def sort_order(self, *keys: str) -> np.ndarray:
        """Row indices in the stable order of the columns named (text by its sorted labels)."""
        columns = self._sort_columns(keys)
        if len(columns) == 1:
            return np.argsort(columns[0], kind="stable")
        return np.lexsort(tuple(reversed(columns)))

    def sort_values(self, by: str | list[str], kind: str = "stable") -> MetricTable:
        """pandas' spelling of sorted_by (stable whatever `kind` says)."""
        del kind
        return self.sorted_by(*([by] if isinstance(by, str) else by))

    def equals(self, other: object) -> bool:
        if not isinstance(other, MetricTable) or len(self) != len(other):
            return False
        return all(
            np.array_equal(self[name], other[name], equal_nan=name == "value")
            for name in METRIC_COLUMNS
        )

    def to_frame(self) -> pd.DataFrame:
        import pandas as pd  # here: a logs-only analyze never imports pandas

        return pd.DataFrame(
            {
                name: (list(self[name]) if name in _TEXT_COLUMNS else self[name])
                for name in METRIC_COLUMNS
            },
            columns=list(METRIC_COLUMNS),
        )


def _in_order(columns: list[np.ndarray]) -> bool:
    """Whether the rows already are in the stable sort order of `columns` (the first the primary
    key). A NaN counts as out of order: such a table is sorted as before."""
    if not columns or columns[0].size < 2:
        return True
    tied = np.ones(columns[0].size - 1, dtype=bool)  # rows i and i+1 equal on the keys so far
    for column in columns:
        before, after = column[:-1], column[1:]
        if np.any(tied & ~(before <= after)):
            return False
        tied &= before == after
        if not tied.any():
            break
    return True


def _text(column: TextInput, size: int) -> TextColumn:
    if isinstance(column, TextColumn):
        return column
    if isinstance(column, str):
        return TextColumn.constant(column, size)
    return TextColumn.of_texts(column)


def first_seen_codes(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(code of each value, the distinct values), codes numbered in order of first appearance:
    pandas.factorize without pandas."""
    if values.size == 0:
        return np.empty(0, dtype=np.int64), values[:0]
    distinct, first, inverse = np.unique(values, return_index=True, return_inverse=True)
    by_appearance = np.argsort(first, kind="stable")
    rank = np.empty(by_appearance.size, dtype=np.int64)
    rank[by_appearance] = np.arange(by_appearance.size, dtype=np.int64)
    return rank[inverse.reshape(-1)], distinct[by_appearance]


def sorted_unique(values: np.ndarray) -> np.ndarray:
    """np.unique(values) (the sorted distinct values), by sorting when they are integers: numpy 2
    hashes integers first, ~20x slower than a sort on the 10^5 alarm indices of a long run."""
    if values.dtype.kind not in "iub" or values.ndim != 1:
        return np.unique(values)
    ordered = np.sort(values)
    if ordered.size == 0:
        return ordered
    distinct: np.ndarray = ordered[np.concatenate(([True], ordered[1:] != ordered[:-1]))]
    return distinct
