"""signals.last_finite, the baseline before an event, is the whole-prefix expression it replaced
(measure_impact and repeated_data ask for it hundreds of times on a long log)."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.signals import last_finite


def test_last_finite_is_the_whole_prefix_expression() -> None:
    rng = np.random.default_rng(8)
    for trial in range(3000):
        size = int(rng.integers(0, 400))
        values = rng.normal(size=size)
        missing = rng.random() ** 0.5  # from a few NaN/inf to nearly all of them
        values[rng.random(size) < missing] = rng.choice([np.nan, np.inf, -np.inf])
        stop = int(rng.integers(-size - 5, size + 10))
        count = int(rng.integers(0, 60))
        prefix = values[:stop]
        expected = prefix[np.isfinite(prefix)][-count:]
        got = last_finite(values, stop, count)
        assert np.array_equal(expected, got), (trial, size, stop, count)
