"""Long-form points collected one at a time, in compact arrays, up to a cap.

The text and JSON log readers used to collect a Python tuple per point (step, name, value,
original name): ~130 bytes a point, ~14x the bytes of a nanoGPT log, and building the table from
them cost as much again. Here a point costs 24 bytes (int64 step, float64 value, two int32 codes
into the names seen), and a reader stops at MAX_POINTS_PER_FILE points, saying so in `partial`.
"""

from __future__ import annotations

from array import array

import numpy as np

from tscope.model.metric_table import MetricTable, TextColumn

# Points one file may give: nanoGPT logging every iteration of a 600k-iteration run gives ~2.4M.
# A point costs 24 bytes while read and 48 in the table (0.24 GB at the cap, plus the analysis'
# sorted copies); past the cap the rest of the file is not read. At 10M a crafted nanoGPT log
# took 52 s and 1.5 GB; at 5M, 19 s and 0.77 GB.
MAX_POINTS_PER_FILE = 5_000_000
# Steps a float64 holds exactly: the long-form table is int64, charts are float.
MAX_STEP = 2**53


class MetricRows:
    """(step, metric, value, original name) points in file order, held as typed arrays."""

    __slots__ = (
        "_metric",
        "_metric_codes",
        "_original",
        "_original_codes",
        "_steps",
        "_values",
        "dropped_steps",
        "limit",
        "reached_limit",
    )

    def __init__(self, limit: int | None = None) -> None:
        self.limit = MAX_POINTS_PER_FILE if limit is None else limit
        self._steps = array("q")
        self._values = array("d")
        self._metric = array("i")
        self._original = array("i")
        self._metric_codes: dict[str, int] = {}
        self._original_codes: dict[str, int] = {}
        self.dropped_steps = 0  # points whose step is outside 0 .. 2**53 (not an int64 either)
        # Set once the cap is reached, and kept after to_table() released the arrays.
        self.reached_limit = False

    def __len__(self) -> int:
        return len(self._steps)

    @property
    def full(self) -> bool:
        """Whether the cap is reached: the reader stops reading the file."""
        return self.reached_limit

    def add(self, step: int, metric: str, value: float, original: str) -> None:
        """One point; ignored once the cap is reached (the reader checks `full` and stops)."""
        if self.reached_limit:
            return
        if not 0 <= step < MAX_STEP:
            self.dropped_steps += 1
            return
        metric_code = self._metric_codes.get(metric)
        if metric_code is None:
            metric_code = self._metric_codes[metric] = len(self._metric_codes)
        original_code = self._original_codes.get(original)
        if original_code is None:
            original_code = self._original_codes[original] = len(self._original_codes)
        self._steps.append(step)
        self._values.append(value)
        self._metric.append(metric_code)
        self._original.append(original_code)
        self.reached_limit = len(self._steps) >= self.limit

    def has_metric(self, metric: str) -> bool:
        return metric in self._metric_codes

    def steps(self) -> np.ndarray:
        """The points' steps, file order (a copy)."""
        return np.frombuffer(self._steps, dtype=np.int64).copy()

    def to_table(self, source: str) -> MetricTable:
        """The long-form table; the arrays are released as their columns are built."""
        size = len(self._steps)
        if not size:
            return MetricTable.no_rows()
        steps = np.frombuffer(self._steps, dtype=np.int64).copy()
        self._steps = array("q")
        values = np.frombuffer(self._values, dtype=np.float64).copy()
        self._values = array("d")
        metric = np.frombuffer(self._metric, dtype=np.int32).astype(np.intp)
        self._metric = array("i")
        original = np.frombuffer(self._original, dtype=np.int32).astype(np.intp)
        self._original = array("i")
        return MetricTable(
            steps,
            TextColumn(metric, tuple(self._metric_codes)),
            values,
            source,
            TextColumn(original, tuple(self._original_codes)),
            np.arange(size, dtype=np.int64),
        )

    def problems(self) -> list[str]:
        """The `partial` notes: the cap cut the file short, points had an unusable step."""
        notes = []
        if self.reached_limit:
            notes.append(
                f"only the first {self.limit:,} points were read: tscope reads at most that many "
                "from one log file (no training run logs more); the rest of the file is left out"
            )
        if self.dropped_steps:
            notes.append(
                f"{self.dropped_steps} point(s) skipped: their step is beyond 2**53, which no "
                "training run reaches"
            )
        return notes
