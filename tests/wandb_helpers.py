"""Shared by the W&B reader tests: one series of a read, in the order it was logged."""

from __future__ import annotations

import numpy as np

from tscope.model import LogRead


def series(read: LogRead, metric: str) -> tuple[np.ndarray, np.ndarray]:
    table = read.metrics.to_frame()
    rows = table[table["metric"] == metric].sort_values("order")
    return rows["step"].to_numpy(), rows["value"].to_numpy()
