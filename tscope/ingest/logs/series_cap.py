"""A cap on the number of series one case considers, with the key series always kept.

Every series costs the analysis and, above all, the report (a chart bucket list per series in
case.json, a row in the other-metrics chart): a CSV with 100,000 columns or a JSON Lines file
with a new key on every line would take hours and a report nobody can read. Past MAX_SERIES the
series kept are, in this order: the key series the analyzers use (loss, grad norm, learning rate,
eval loss, loss scale, skipped steps), the other loss-like series (the ones spikes are searched
in), then the rest in the order the files first logged them. A caveat in the case says how many
were left out, and names a few. A series whose name is longer than MAX_NAME_CHARS is left out
whatever the count, with its own caveat.
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from tscope.model import Caveat, LogRead
from tscope.model.metric_names import (
    EVAL_LOSS,
    GRAD_NORM,
    LEARNING_RATE,
    LOSS,
    LOSS_SCALE,
    MAX_METRIC_NAME_CHARS,
    SKIPPED_STEPS,
    is_loss_like,
)

# bench/bench_wide_tables.py: a 1,000-column CSV analyzes and renders in ~3 s (the case.json and
# the charts grow with every series kept); real runs log tens to a few hundred series, per-layer
# statistics included.
MAX_SERIES = 1000
KEY_SERIES = (LOSS, GRAD_NORM, LEARNING_RATE, EVAL_LOSS, LOSS_SCALE, SKIPPED_STEPS)
# Columns a table reader converts, before names are known to be metrics: room for the series cap
# with a W&B export's __MIN/__MAX companions. Arrow converts 100,000 CSV columns in 24 s.
MAX_TABLE_COLUMNS = 3 * MAX_SERIES
# Raw column names that hold the step or a key series, whatever the producer calls them.
_KEY_COLUMN_WORDS = ("step", "loss", "grad_norm", "learning_rate", "lr", "epoch", "iter", "time")
_NAMES_SHOWN = 5
# A longer series name is left out, with a caveat (ten 1 MB column names in a 10 MB CSV made a
# 1 GB case.html and a 1 GB SVG: 5 GB of memory, 3.5 minutes).
MAX_NAME_CHARS = MAX_METRIC_NAME_CHARS
_NAME_SHOWN_CHARS = 80  # of a left-out name quoted in a caveat


def columns_to_read(header: list[str], limit: int = MAX_TABLE_COLUMNS) -> list[str]:
    """At most `limit` of a table's column names: those naming a step or a key series first,
    then the others in file order."""
    key = [name for name in header if any(word in name.lower() for word in _KEY_COLUMN_WORDS)]
    chosen = set(key[:limit])
    for name in header:
        if len(chosen) >= limit:
            break
        chosen.add(name)
    return [name for name in header if name in chosen]


def cap_series(reads: list[LogRead], limit: int = MAX_SERIES) -> tuple[list[LogRead], list[Caveat]]:
    """The reads with at most `limit` distinct series among them, and a caveat if any were cut."""
    first_seen: dict[str, int] = {}
    for read in reads:
        for metric in _first_appearance(read):
            first_seen.setdefault(metric, len(first_seen))
    overlong = [name for name in first_seen if len(name) > MAX_NAME_CHARS]
    if len(first_seen) <= limit and not overlong:
        return reads, []
    key_rank = {name: rank for rank, name in enumerate(KEY_SERIES)}

    def priority(name: str) -> tuple[int, int]:
        if name in key_rank:
            return (0, key_rank[name])
        return (1 if is_loss_like(name) else 2, first_seen[name])

    ranked = sorted((name for name in first_seen if len(name) <= MAX_NAME_CHARS), key=priority)
    kept = set(ranked[:limit])
    left_out = ranked[limit:]
    caveats = []
    if overlong:
        caveats.append(
            Caveat(
                "series_name_length",
                f"{len(overlong)} series with names longer than {MAX_NAME_CHARS} characters are "
                f"left out of the analysis and the report (no logger writes such names; the file "
                f"is damaged or crafted): {_shown(overlong)}.",
                "tscope",
            )
        )
    capped = []
    for read in reads:
        column = read.metrics.metric
        kept_code = np.asarray([label in kept for label in column.labels], dtype=bool)
        keep = kept_code[column.codes] if column.codes.size else np.ones(0, dtype=bool)
        whole = bool(keep.all())
        # The left-out names are dropped from the labels too: each later slice of the table
        # would otherwise carry (and each lookup of names scan) every name of the file.
        capped.append(
            read
            if whole
            else replace(read, metrics=read.metrics.take(keep).without_unused_labels())
        )
    if left_out:
        caveats.append(
            Caveat(
                "series_cap",
                f"{len(ranked)} series were logged; tscope considers at most {limit} (the key "
                f"and loss-like series first, then the first logged), so {len(left_out)} are "
                f"left out of the analysis and the report: {_shown(left_out)}.",
                "tscope",
            )
        )
    return capped, caveats


def _shown(names: list[str]) -> str:
    """A few names, each cut to _NAME_SHOWN_CHARS, for a caveat."""
    cut = [
        name if len(name) <= _NAME_SHOWN_CHARS else name[:_NAME_SHOWN_CHARS] + "…"
        for name in names[:_NAMES_SHOWN]
    ]
    return ", ".join(cut) + (", ..." if len(names) > _NAMES_SHOWN else "")


def _first_appearance(read: LogRead) -> list[str]:
    """The read's metric names in the order of their first row (what Series.unique() gave)."""
    column = read.metrics.metric
    if not column.codes.size:
        return []
    codes, first = np.unique(column.codes, return_index=True)
    return [column.labels[code] for code in codes[np.argsort(first, kind="stable")].tolist()]
