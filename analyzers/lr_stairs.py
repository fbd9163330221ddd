"""An LR logged as stairs: each value held for the same k ≥ 2 logged points, then a step.

A loop that logs the LR once per micro-batch under gradient accumulation (an accelerate loop
logging by batch index) holds each value for k points. Read point by point, every stair of a
linear warm-up is a jump (×2, ×1.5, ×1.33 on two healthy helper-made runs, 3-5 warnings each),
so lr_jumps judges such a log on the first point of each stair; step_axes.py reads k as the
number of logged steps per optimizer update.
"""

from __future__ import annotations

import numpy as np

# Stairs: at least STAIR_SHARE of the interior runs of equal values have the same length k ≥ 2,
# and there are STAIR_MIN_RUNS of them. A constant LR that jumps once has two runs, not stairs.
STAIR_MIN_RUNS = 4
STAIR_SHARE = 0.8


def stair_starts(lrs: np.ndarray) -> np.ndarray | None:
    """The index where each run of equal values starts, when the runs are stairs; else None."""
    starts = _run_starts(lrs)
    return starts if _stair_length_of(starts) is not None else None


def stair_length(lrs: np.ndarray) -> int | None:
    """How many logged points each value is held for when the log is stairs, else None."""
    return _stair_length_of(_run_starts(lrs))


def _run_starts(lrs: np.ndarray) -> np.ndarray:
    return np.concatenate(([0], np.flatnonzero(lrs[1:] != lrs[:-1]) + 1))


def _stair_length_of(starts: np.ndarray) -> int | None:
    interior = np.diff(starts)[1:]  # the first run may be cut by the log's start, the last too
    if interior.size < STAIR_MIN_RUNS:
        return None
    lengths, counts = np.unique(interior, return_counts=True)
    if lengths[np.argmax(counts)] < 2 or counts.max() < STAIR_SHARE * interior.size:
        return None
    return int(lengths[np.argmax(counts)])
