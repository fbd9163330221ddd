"""Where tqdm's progress bars stood around each printed row of a Trainer log, held compactly.

The Trainer stdout reader reads the step of a printed row off the training bar redrawn around it.
Each row used to hold its own copy of every bar's position: memory grew as rows × distinct bar
totals, and a crafted 577 KB log (2,000 totals, then 20,000 rows) took 1.6 GB. Here each bar keeps
one entry per row interval it was seen in (three int64s: 24 bytes for the ≥ 6 bytes `|n/m [` of
the log that made it), and the number of distinct bars is capped.
"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections import Counter

# Distinct bar totals followed in one log. A Trainer run shows its training bar, an evaluation bar
# per evaluation set and a few `datasets` map bars; past the cap new totals are ignored and the
# reader says so (a partial note), which bounds the per-bar state a crafted log can create.
MAX_PROGRESS_BARS = 100


class _BarTrace:
    """One bar's positions, per count of rows printed before it was seen (ascending)."""

    __slots__ = ("first", "last", "rows_printed")

    def __init__(self) -> None:
        self.rows_printed = array("q")
        self.first = array("q")  # the first position shown in that interval between rows
        self.last = array("q")  # the last one


class ProgressBars:
    """Every bar's position over the log, as the rows around it need it."""

    def __init__(self) -> None:
        self.current: dict[int, int] = {}  # total -> last position shown
        self.moves: Counter[int] = Counter()  # total -> how often its position changed
        self.ignored_sightings = 0  # bars not followed: past MAX_PROGRESS_BARS distinct totals
        self._traces: dict[int, _BarTrace] = {}

    def see(self, n: int, total: int, rows_printed: int) -> bool:
        """Record the bar `n/total` drawn after `rows_printed` rows; False if it is not followed."""
        trace = self._traces.get(total)
        if trace is None:
            if len(self._traces) >= MAX_PROGRESS_BARS:
                self.ignored_sightings += 1
                return False
            trace = self._traces[total] = _BarTrace()
        if self.current.get(total) != n:
            self.moves[total] += 1
        self.current[total] = n
        if trace.rows_printed and trace.rows_printed[-1] == rows_printed:
            trace.last[-1] = n
        else:
            trace.rows_printed.append(rows_printed)
            trace.first.append(n)
            trace.last.append(n)
        return True

    def before_row(self, total: int, row_index: int) -> int | None:
        """The position of bar `total` last shown before row `row_index` was printed."""
        trace = self._traces.get(total)
        if trace is None:
            return None
        at = bisect_right(trace.rows_printed, row_index) - 1
        return trace.last[at] if at >= 0 else None

    def first_after_rows(self, total: int) -> dict[int, int]:
        """Row index -> the first position of bar `total` shown after that row (and before the
        next); rows after which the bar was not redrawn are absent."""
        trace = self._traces.get(total)
        if trace is None:
            return {}
        return {
            printed - 1: first
            for printed, first in zip(trace.rows_printed, trace.first, strict=True)
            if printed > 0
        }

    def problems(self) -> list[str]:
        if not self.ignored_sightings:
            return []
        return [
            f"{self.ignored_sightings} progress-bar redraw(s) were not followed: the log shows more "
            f"than {MAX_PROGRESS_BARS} distinct bars, far more than a training run draws"
        ]
