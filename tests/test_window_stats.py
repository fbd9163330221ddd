"""window_stats' own median is np.median, bit for bit (signed zeros included)."""

from __future__ import annotations

import numpy as np
import pytest

from tscope.analyzers.baseline import median_of_finite


@pytest.mark.parametrize("seed", range(10))
def testmedian_of_finite_is_npmedian_of_finite(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for _ in range(300):
        n = int(rng.integers(1, 120))
        values = rng.normal(0.0, 10.0 ** rng.uniform(-8, 8), n)
        if seed % 2:
            values = rng.choice([0.0, -0.0, 5e-324, -5e-324, 1.0, -1.0], n)
        assert (
            np.float64(median_of_finite(values)).tobytes()
            == np.float64(np.median(values)).tobytes()
        )
