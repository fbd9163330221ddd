"""A training run as the readers found it: one long-form metric table plus events and caveats."""

from __future__ import annotations

import weakref
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from tscope.model.metric_table import MetricTable, TextColumn


def empty_metric_table() -> MetricTable:
    return MetricTable.no_rows()


@dataclass(frozen=True)
class Source:
    """One input file that was read, and the format it was read as."""

    kind: str
    path: str


@dataclass(frozen=True)
class PartialInput:
    """An input that could not be read, or only in part, and why."""

    path: str
    problem: str


# A resume event's number holding what the earlier attempt logged for a metric at the first
# re-logged step (ingest/assemble.py `relogged_numbers`), followed by the metric's name.
RELOGGED_KEY = "logged_before_rewind:"
# A resume event's numbers when the data position went back (the logged epoch fell while the step
# counted on): the epoch before and after.
EPOCH_BEFORE_KEY = "epoch_before"
EPOCH_AFTER_KEY = "epoch_after"
STEPS_AGAIN_KEY = "steps_of_data_again"  # how many steps' data the loader serves twice (0: unknown)


@dataclass(frozen=True)
class RunEvent:
    """Something that happened to the run rather than to a metric: a resume, a skipped step."""

    kind: str  # "resume", "skipped_step", "overflow", "restart_note"
    step: int
    detail: str
    source: str
    numbers: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True)
class Caveat:
    """A limit of the evidence that the report must state (e.g. loss averaged over a window)."""

    kind: str
    message: str
    source: str
    # What a later pass over the run's other files needs from it (DeepSpeed's global batch);
    # not written to the case.
    numbers: dict[str, float] = field(default_factory=dict, compare=False)


@dataclass
class LogRead:
    """What one reader extracted from one file: a fragment of a Run."""

    kind: str
    path: str
    metrics: MetricTable = field(default_factory=MetricTable.no_rows)
    events: list[RunEvent] = field(default_factory=list)
    caveats: list[Caveat] = field(default_factory=list)
    config: dict[str, Any] = field(default_factory=dict)
    partial: list[PartialInput] = field(default_factory=list)
    # Ordering hint when several files of one kind cover the same steps: later wins.
    # Readers set it from the producer's wall time when they have one.
    started_at: float | None = None

    @staticmethod
    def rows_to_table(rows: list[tuple[int, str, float, str]], source: str) -> MetricTable:
        """Build the long-form table from (step, canonical_name, value, original_name) rows."""
        if not rows:
            return MetricTable.no_rows()
        steps, names, values, originals = zip(*rows, strict=True)
        return MetricTable(
            np.asarray(steps, dtype=np.int64),
            TextColumn.of_texts(names),
            np.asarray(values, dtype=np.float64),
            source,
            TextColumn.of_texts(originals),
            np.arange(len(rows), dtype=np.int64),
        )


# Each Run's series, split out of its table on first use and dropped when the Run is collected:
# the analyzers ask for the same few series dozens of times, and each lookup would scan and sort
# the whole table again. Sound because a Run never changes once built (frozen, and `metrics` is
# not modified in place). Keyed by id() outside the instance, so Run(**run.__dict__) still works.
_SPLIT_SERIES: dict[int, dict[str, tuple[np.ndarray, np.ndarray]]] = {}


def _split_all(metrics: MetricTable) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """metric -> (steps, values) sorted by step (stable), for every metric of a long table."""
    if metrics.empty:
        # One empty entry, so that the cache is not empty and the split is not tried again.
        return {"": _empty_series()}
    # Sorted by the names' sorted order, then the step (stable): the order of
    # sort_values(["metric", "step"], kind="stable"), on the codes, not the strings.
    codes, names = metrics.metric.sorted_codes()
    order = np.lexsort((metrics.step, codes))
    codes = codes[order]
    steps = metrics.step[order]
    values = metrics.value[order]
    # Handed out as views by Run.series: read-only, so no caller can change the cache in place.
    steps.flags.writeable = False
    values.flags.writeable = False
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    ends = np.r_[starts[1:], len(codes)]
    return {
        names[int(codes[start])]: (steps[start:end], values[start:end])
        for start, end in zip(starts, ends, strict=True)
    }


def _empty_series() -> tuple[np.ndarray, np.ndarray]:
    steps, values = np.empty(0, dtype=np.int64), np.empty(0, dtype=np.float64)
    steps.flags.writeable = False
    values.flags.writeable = False
    return steps, values


@dataclass(frozen=True)
class Run:
    """A normalized run: every metric series, de-duplicated so the latest logged segment wins."""

    name: str
    path: str
    sources: tuple[Source, ...]
    metrics: MetricTable  # METRIC_COLUMNS, one row per (metric, step) after resolution
    events: tuple[RunEvent, ...] = ()
    caveats: tuple[Caveat, ...] = ()
    config: dict[str, Any] = field(default_factory=dict)
    partial: tuple[PartialInput, ...] = ()

    @property
    def metric_names(self) -> list[str]:
        # From the cached split, not a count over every row per call: the analyzers ask once per
        # spike, and a 1M-row log with 50,000 spikes took 196 s (red team, session 27).
        return [] if self.metrics.empty else sorted(self._all_series())

    def series(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        """(steps, values) of one metric, sorted by step, one value per step. Empty if absent.

        Read-only views of the cached split (no copy per call: the analyzers ask for the same
        series dozens of times, once per spike); a caller that needs to change one copies it.
        """
        return self._split(metric)

    def has(self, metric: str) -> bool:
        return self._split(metric)[0].size > 0

    def _split(self, metric: str) -> tuple[np.ndarray, np.ndarray]:
        found = self._all_series().get(metric)
        return _empty_series() if found is None else found

    def _all_series(self) -> dict[str, tuple[np.ndarray, np.ndarray]]:
        """metric -> (steps, values) for every metric, split once per run and cached."""
        cache = _SPLIT_SERIES.get(id(self))
        if cache is None:
            cache = _SPLIT_SERIES[id(self)] = {}
            weakref.finalize(self, _SPLIT_SERIES.pop, id(self), None)
        if not cache:
            # Every series at once, in one sort: one scan of the table per metric asked for
            # made the analysis quadratic in the number of series (8,000 columns: minutes).
            cache.update(_split_all(self.metrics))
        return cache

    @property
    def first_step(self) -> int | None:
        return int(self.metrics.step.min()) if not self.metrics.empty else None

    @property
    def last_step(self) -> int | None:
        return int(self.metrics.step.max()) if not self.metrics.empty else None

    def events_of(self, kind: str) -> list[RunEvent]:
        return [event for event in self.events if event.kind == kind]
