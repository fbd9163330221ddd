"""The CUSUM scan with a short first look raises exactly the alarms of whole-chunk scanning."""

from __future__ import annotations

import numpy as np
import pytest
from tscope.analyzers.detectors.cusum import (
    CUSUM_DECISION_SIGMA,
    CUSUM_REFERENCE_SIGMA,
    _one_sided_cusum,
)


def whole_chunk_cusum(
    residuals: np.ndarray, reference: float, decision: float, chunk_length: int = 1024
) -> list[tuple[int, int, float]]:
    """The original scan, one whole chunk at a time: the reference."""
    found: list[tuple[int, int, float]] = []
    position, carried, excursion_start = 0, 0.0, 0
    while position < len(residuals):
        chunk = residuals[position : position + chunk_length] - reference
        cumulative = np.cumsum(chunk)
        sums = cumulative - np.minimum(np.minimum.accumulate(cumulative), -carried)
        crossing = np.flatnonzero(sums > decision)
        zero_at = np.flatnonzero(sums <= 0.0)
        if crossing.size == 0:
            if zero_at.size:
                excursion_start = position + int(zero_at[-1]) + 1
            carried = float(sums[-1])
            position += len(chunk)
            continue
        first = int(crossing[0])
        zeros_before = zero_at[zero_at < first]
        if zeros_before.size:
            excursion_start = position + int(zeros_before[-1]) + 1
        found.append((excursion_start, position + first, float(sums[first])))
        position += first + 1
        carried, excursion_start = 0.0, position
    return found


@pytest.mark.parametrize("seed", range(12))
def test_alarms_match_whole_chunk_scanning(seed: int) -> None:
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 6000))
    # Noise, drifts that re-arm the sum every few dozen points, and long quiet stretches.
    residuals = rng.normal(0.0, 1.0, n) + rng.choice([0.0, 0.3, 0.8, 2.0]) * np.sin(
        np.arange(n) / rng.uniform(50, 2000)
    )
    residuals = np.clip(residuals, -3.0, 3.0)
    for sign in (1.0, -1.0):
        assert _one_sided_cusum(
            sign * residuals, CUSUM_REFERENCE_SIGMA, CUSUM_DECISION_SIGMA
        ) == whole_chunk_cusum(sign * residuals, CUSUM_REFERENCE_SIGMA, CUSUM_DECISION_SIGMA)
