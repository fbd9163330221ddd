"""Merge the readers' fragments into one Run: pick a source per metric, resolve resumes."""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tscope.ingest.logs.series_cap import cap_series
from tscope.ingest.registry import READERS
from tscope.ingest.settings_bound import BoundedSettings
from tscope.model import Caveat, LogRead, MetricTable, PartialInput, Run, RunEvent, Source
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE, LOSS
from tscope.model.run import RELOGGED_KEY

_READER_PRIORITY = {reader.name: rank for rank, reader in enumerate(READERS)}


def assemble_run(name: str, path: str, reads: list[LogRead], partial: list[PartialInput]) -> Run:
    reads, caveats = cap_series(_drop_superseded(reads))
    chosen_tables: list[MetricTable] = []
    events: list[RunEvent] = [event for read in reads for event in read.events]

    # Each read's table split by metric once: filtering the whole table again for every metric
    # made assembly quadratic in the number of series (8,000 CSV columns: minutes).
    by_metric = _split_by_metric(reads)
    first_steps = {id(read): _first_step(read) for read in reads}
    for metric, candidates in _reads_by_metric(reads, by_metric).items():
        kind = _preferred_kind(metric, candidates, by_metric)
        ordered = _file_order([read for read in candidates if read.kind == kind], first_steps)
        table, resume_events = _resolve_segments(
            [by_metric[id(read)][metric] for read in ordered], metric
        )
        chosen_tables.append(table)
        events.extend(resume_events)
        if any(read.kind != kind for read in candidates):
            others = sorted({read.kind for read in candidates if read.kind != kind})
            caveats.append(
                Caveat(
                    "source_choice",
                    f"{metric} is logged by several formats; the {kind} series is used "
                    f"(most points); also seen in {', '.join(others)}.",
                    kind,
                )
            )

    for read in reads:
        caveats.extend(read.caveats)
    metrics = MetricTable.concat(_in_metric_order(chosen_tables)).sorted_by("metric", "step")

    # One bound for the run's settings, whatever format and however many files state them
    # (settings_bound.py): a 90-deep W&B config of long keys once took the report 100x its
    # file's size, and every event file of a run could bring its own 10,000.
    settings = BoundedSettings()
    first_cut: str | None = None
    for read in sorted(reads, key=lambda r: (_READER_PRIORITY.get(r.kind, 99), r.path)):
        for key, value in read.config.items():
            settings.add(str(key), value)
        if settings.dropped and first_cut is None:
            first_cut = read.path
    note = settings.partial_note()
    if note is not None and first_cut is not None:
        partial = [*partial, PartialInput(first_cut, note)]

    return Run(
        name=name,
        path=path,
        sources=tuple(sorted({Source(read.kind, read.path) for read in reads}, key=_source_key)),
        metrics=metrics,
        events=tuple(_unique_events(events)),
        caveats=tuple(_unique_caveats(caveats)),
        config=settings.kept,
        partial=tuple(partial) + tuple(p for read in reads for p in read.partial),
    )


def _in_metric_order(tables: list[MetricTable]) -> list[MetricTable]:
    """One table per metric, by metric name when they share their text labels (one read's rows):
    concatenated so, the rows usually are in (metric, step) order already and sorted_by keeps
    them without a sort of every row. Tables with other labels keep their order, since
    concatenation numbers merged labels in table order."""
    if len(tables) < 2 or any(table.empty for table in tables):
        return tables
    first = tables[0]
    shared = all(
        getattr(table, column).labels == getattr(first, column).labels
        for table in tables[1:]
        for column in ("metric", "source", "original_name")
    )
    return sorted(tables, key=lambda table: table.metric.at(0)) if shared else tables


def _source_key(source: Source) -> tuple[str, str]:
    return (source.path, source.kind)


def _drop_superseded(reads: list[LogRead]) -> list[LogRead]:
    """Readers with `newest_only` (every checkpoint keeps a copy): keep the newest file only."""
    kept: list[LogRead] = []
    newest: dict[str, LogRead] = {}
    newest_only = {r.name for r in READERS if getattr(r, "newest_only", False)}
    for read in reads:
        if read.kind not in newest_only:
            kept.append(read)
            continue
        current = newest.get(read.kind)
        if current is None or (read.started_at or 0.0, read.path) > (
            current.started_at or 0.0,
            current.path,
        ):
            newest[read.kind] = read
    return kept + list(newest.values())


def _split_by_metric(reads: list[LogRead]) -> dict[int, dict[str, MetricTable]]:
    """id(read) -> {metric: its rows in the read's table, in file order}: one pass per read.

    The metrics in the order they first appear in the file (what groupby(sort=False) gave).
    """
    split: dict[int, dict[str, MetricTable]] = {}
    for read in reads:
        blocks = _metric_blocks(read.metrics)
        if blocks is not None:
            split[id(read)] = blocks
            continue
        table = read.metrics.sorted_by("order")
        codes = table.metric.codes
        if not codes.size:
            split[id(read)] = {}
            continue
        by_code = np.argsort(codes, kind="stable")  # each metric's rows together, file order
        sorted_codes = codes[by_code]
        starts = np.flatnonzero(np.r_[True, sorted_codes[1:] != sorted_codes[:-1]])
        ends = np.r_[starts[1:], sorted_codes.size]
        groups = sorted(
            zip(by_code[starts].tolist(), starts.tolist(), ends.tolist(), strict=True)
        )  # by the row where each metric first appears
        split[id(read)] = {
            table.metric.at(first): table.take(by_code[start:end]) for first, start, end in groups
        }
    return split


def _metric_blocks(table: MetricTable) -> dict[str, MetricTable] | None:
    """_split_by_metric's answer for a table that a wide log's reader built column by column:
    each metric's rows one stretch, in file order. Views of those stretches, metrics by their
    first row in the file; None for any other table (the sort by file order then groups it)."""
    codes, order = table.metric.codes, table.order
    if not codes.size:
        return None
    starts = np.flatnonzero(np.r_[True, codes[1:] != codes[:-1]])
    if starts.size != np.unique(codes[starts]).size:
        return None  # a metric in two stretches
    ends = np.r_[starts[1:], codes.size]
    within = np.ones(codes.size, dtype=bool)
    within[starts] = False  # the first row of a stretch has no predecessor in it
    if np.any((np.diff(order, prepend=order[0]) < 0) & within):
        return None  # a stretch not in file order
    # The stable sort by file order puts the stretch with the earliest first row first; with
    # equal first rows, the stretch that comes first in the table.
    ranked = sorted(zip(order[starts].tolist(), starts.tolist(), ends.tolist(), strict=True))
    return {table.metric.at(start): table.rows_between(start, end) for _, start, end in ranked}


def _first_step(read: LogRead) -> float:
    return float(read.metrics.step.min()) if not read.metrics.empty else 0.0


def _reads_by_metric(
    reads: list[LogRead], by_metric: dict[int, dict[str, MetricTable]]
) -> dict[str, list[LogRead]]:
    grouped: dict[str, list[LogRead]] = {}
    for read in reads:
        for metric in by_metric[id(read)]:
            grouped.setdefault(metric, []).append(read)
    return grouped


def _preferred_kind(
    metric: str, candidates: list[LogRead], by_metric: dict[int, dict[str, MetricTable]]
) -> str:
    """The format whose files hold the most points of this metric; registry order breaks ties."""
    counts: dict[str, int] = {}
    for read in candidates:
        counts[read.kind] = counts.get(read.kind, 0) + len(by_metric[id(read)][metric])
    return min(counts, key=lambda kind: (-counts[kind], _READER_PRIORITY.get(kind, 99), kind))


def _file_order(reads: list[LogRead], first_steps: dict[int, float]) -> list[LogRead]:
    """Files of one format in the order they were written: wall time if known, else first step."""

    def key(read: LogRead) -> tuple[float, float, str]:
        first_step = first_steps[id(read)]
        started = read.started_at if read.started_at is not None else first_step
        return (started, first_step, read.path)

    return sorted(reads, key=key)


RELOGGED_METRICS = frozenset({LOSS, LEARNING_RATE, GRAD_NORM})
# An isolated repeated step whose value did not change: merged into a resume at that step that
# another metric shows, dropped otherwise (`_unique_events`).
RELOGGED_ONLY = "relogged_unchanged"
# At most one isolated repeated step per this many rows reads as resumes (see _resolve_segments).
ISOLATED_REPEAT_RATE = 1000
# A step column that goes back more than this often (and at more than one row in a hundred) is
# not in write order (a log exported newest first, steps counted down), not a run resumed that
# many times: its rows are put in step order with no resume. Every rewind was a resume event
# and a finding: a 1.2 MB CSV counting down took 88 s and 1.3 GB (red team, session 27). The
# most resumes seen in a real log here are a few dozen (preempted pretraining in shared/realdata).
UNORDERED_MIN_REWINDS = 100
UNORDERED_REWIND_RATE = 100


def _resolve_segments(parts: list[MetricTable], metric: str) -> tuple[MetricTable, list[RunEvent]]:
    """Concatenate one metric's rows from each file in write order; a step that goes backwards
    starts a new segment.

    The latest segment wins for every step it covers (a resumed run re-logs the steps after its
    checkpoint), and each rewind becomes a `resume` event. Its numbers hold, per metric, the
    value the earlier attempt logged at the first re-logged step (`relogged_numbers`): what the
    resumed run should have logged there had it restored everything.
    """
    table = MetricTable.concat(parts)
    steps = table.step
    events: list[RunEvent] = []
    if len(steps) > 1:
        running_max = np.maximum.accumulate(steps)
        rewinds = np.flatnonzero(steps[1:] < steps[:-1]) + 1
        if rewinds.size > UNORDERED_MIN_REWINDS and (
            rewinds.size * UNORDERED_REWIND_RATE > len(steps)
        ):
            rewinds = rewinds[:0]  # not in write order: sorted below, no resume
        for index in rewinds:
            events.append(
                RunEvent(
                    "resume",
                    int(steps[index]),
                    f"steps go back from {int(running_max[index - 1])} to {int(steps[index])}: "
                    "the run was resumed from an earlier point and re-logged these steps",
                    table.source.at(int(index)),
                    {
                        "from_step": float(running_max[index - 1]),
                        "to_step": float(steps[index]),
                        **relogged_numbers(metric, steps, table.value, int(index)),
                    },
                )
            )
        # A step logged twice in a row with another value, where the log otherwise never repeats
        # a step: resumed from the checkpoint just before it, the first step after it re-logged
        # (checkpoint at 1000, 1001 logged, a crash, 1001 logged again). A loop that logs every
        # micro-batch under the optimizer step repeats steps all through the log, not once.
        repeats = np.flatnonzero(steps[1:] == steps[:-1]) + 1
        if 0 < repeats.size <= max(1, len(steps) // ISOLATED_REPEAT_RATE):
            for index in repeats:
                # The same value twice is no resume by itself (the same line written twice), but
                # says what this metric was at a resume that another metric shows.
                same = bool(table.value[index] == table.value[index - 1])
                events.append(
                    RunEvent(
                        RELOGGED_ONLY if same else "resume",
                        int(steps[index]),
                        f"step {int(steps[index])} is logged twice with different values: the "
                        "run was resumed from the step before it and re-logged it",
                        table.source.at(int(index)),
                        {
                            "from_step": float(steps[index]),
                            "to_step": float(steps[index]),
                            **relogged_numbers(metric, steps, table.value, int(index)),
                        },
                    )
                )
        # A later file that starts after the previous one ends is a resume with no overlap.
        sizes = np.cumsum([len(part) for part in parts])[:-1]
        for boundary in sizes:
            if 0 < boundary < len(steps) and steps[boundary] > running_max[boundary - 1]:
                events.append(
                    RunEvent(
                        "resume",
                        int(steps[boundary]),
                        f"a new log file starts at step {int(steps[boundary])} after the previous "
                        f"one ended at {int(running_max[boundary - 1])}",
                        table.source.at(int(boundary)),
                        {
                            "from_step": float(running_max[boundary - 1]),
                            "to_step": float(steps[boundary]),
                        },
                    )
                )
    if bool(np.all(steps[1:] > steps[:-1])):
        return table, events  # every step once, in order: every row is kept (no sort needed)
    # Last logged value wins per step: unique over the reversed sequence keeps the latest row.
    reversed_steps = steps[::-1]
    _, first_in_reversed = np.unique(reversed_steps, return_index=True)
    keep = np.sort(len(steps) - 1 - first_in_reversed)
    return table.take(keep), events


def relogged_numbers(
    metric: str, steps: np.ndarray, values: np.ndarray, index: int
) -> dict[str, float]:
    """{RELOGGED_KEY + metric: the value logged before the rewind at `index` for the step logged
    at `index`} when the earlier attempt logged that step (finite); else {}. Only for the
    canonical series a resume is judged by: a run's own metric names come from its files, and
    evidence keys are the analyzer's vocabulary, not the input's."""
    if metric not in RELOGGED_METRICS:
        return {}
    step = steps[index]
    earlier = np.flatnonzero(steps[:index] == step)
    if earlier.size == 0 or not np.isfinite(values[earlier[-1]]):
        return {}
    return {RELOGGED_KEY + metric: float(values[earlier[-1]])}


def _unique_events(events: list[RunEvent]) -> list[RunEvent]:
    """One event per (kind, step); the numbers of the duplicates (one per metric for a resume)
    are merged into the first's."""
    unique: dict[tuple[str, int], RunEvent] = {}
    for event in sorted(events, key=lambda e: (e.step, e.kind, e.source)):
        if event.kind == RELOGGED_ONLY:
            continue
        kept = unique.get((event.kind, event.step))
        if kept is None:
            unique[(event.kind, event.step)] = event
        elif any(key not in kept.numbers for key in event.numbers):
            unique[(event.kind, event.step)] = replace(
                kept, numbers={**event.numbers, **kept.numbers}
            )
    for event in events:
        kept = unique.get(("resume", event.step))
        if event.kind == RELOGGED_ONLY and kept is not None:
            unique[("resume", event.step)] = replace(
                kept, numbers={**event.numbers, **kept.numbers}
            )
    return list(unique.values())


def _unique_caveats(caveats: list[Caveat]) -> list[Caveat]:
    seen: set[tuple[str, str]] = set()
    unique = []
    for caveat in caveats:
        if (caveat.kind, caveat.message) in seen:
            continue
        seen.add((caveat.kind, caveat.message))
        unique.append(caveat)
    return unique
