"""The recovery of a spike is looked for in doubling windows (analyzers/detectors/merge.py,
`_first_at_or_below`), not by a scan to the end of the series per spike: the same index as the
whole scan, on any series (a 1M-row log with 50,000 spikes took minutes, red team session 27).
The metric names come from the cached split: the same names as a count over the rows."""

from __future__ import annotations

import numpy as np
import pytest
from synthetic import make_run

from tscope.analyzers.detectors.merge import _first_at_or_below


@pytest.mark.parametrize("seed", range(20))
def test_the_doubling_search_finds_what_the_whole_scan_finds(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.standard_normal(int(rng.integers(1, 3000)))
    values[rng.random(values.size) < 0.05] = np.nan
    for _ in range(30):
        start = int(rng.integers(0, values.size + 2))
        bound = float(rng.normal(1.5, 1.0))
        hits = np.flatnonzero(values[start:] <= bound)
        expected = start + int(hits[0]) if hits.size else None
        assert _first_at_or_below(values, start, bound) == expected


def test_metric_names_are_the_metrics_with_rows() -> None:
    run = make_run({"train/loss": np.ones(5), "grad_norm": np.ones(3)})
    assert run.metric_names == sorted(run.metrics.metric.used_labels())
    assert run.metric_names == ["grad_norm", "train/loss"]
