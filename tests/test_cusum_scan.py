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


def test_a_downward_excursion_is_reported_downward_up_to_the_next_change():
    """Issue 11: a fall followed, within the after-window, by a blow-up was reported as a rise
    (the after-window averaged the blow-up in)."""
    from tscope.analyzers.baseline import robust_baseline
    from tscope.analyzers.detectors.cusum import CusumDetector

    rng = np.random.default_rng(0)
    values = np.concatenate([np.full(200, 4.0), np.full(20, 3.0), np.full(60, 20.0)])
    values = values * (1 + 0.01 * rng.standard_normal(values.size))
    detection = CusumDetector().detect(values, robust_baseline(values))
    by_start = {shift.index: shift for shift in detection.shifts}
    fall = next(s for i, s in by_start.items() if 195 <= i <= 202)
    assert fall.after_mean == pytest.approx(3.0, rel=0.02) and fall.before_mean > 3.9
    rise = next(s for i, s in by_start.items() if 218 <= i <= 222)
    assert rise.after_mean == pytest.approx(20.0, rel=0.02)
    # every shift goes the way its excursion went
    assert all(s.after_mean < s.before_mean for i, s in by_start.items() if i < 215)


def test_cusum_on_a_real_run_reports_the_blow_up_where_it_starts():
    """The Trainer run lr_blowup: the loss falls while the LR grows 10% a step from step 100,
    then blows up from step ~142. Before the fix the falling excursion that starts at step 119
    was reported as "rises 3.08 → 3.41", its after-window running into the blow-up."""
    from pathlib import Path

    import tscope

    run = Path(__file__).resolve().parents[1] / "fixtures/data/trainer/lr_blowup"
    case = tscope.analyze(run, read_weights=False)
    cusum = [c for c in case.change_points if c.detector == "cusum" and c.metric == "train/loss"]
    rises = [c for c in cusum if c.after_mean > c.before_mean]
    assert rises and 140 <= rises[0].step <= 145 and rises[0].after_mean > 2 * rises[0].before_mean
    assert [c.step for c in cusum if 100 < c.step < 140] == []
