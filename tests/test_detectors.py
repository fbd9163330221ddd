"""Detectors on planted series: each finds its incident, none fires on stable noise."""

from __future__ import annotations

import numpy as np
import pytest

from tests.synthetic import bad_batch_run, loss_curve, stable_run
from tscope.analyzers.baseline import robust_baseline
from tscope.analyzers.detect import DETECTORS, detect
from tscope.analyzers.detectors.cusum import CusumDetector
from tscope.analyzers.detectors.merge import merge_alarms
from tscope.analyzers.detectors.pelt import PeltDetector
from tscope.analyzers.detectors.robust_z import RobustZDetector
from tscope.analyzers.detectors.spike_score import SpikeScoreDetector, spike_score


@pytest.mark.parametrize("seed", range(5))
@pytest.mark.parametrize(
    "detector", [RobustZDetector(), SpikeScoreDetector()], ids=lambda d: d.name
)
def test_point_detectors_stay_quiet_on_gaussian_noise(detector, seed):
    values = loss_curve(2000, seed)
    assert detector.detect(values, robust_baseline(values)).alarms == []


@pytest.mark.parametrize(
    "detector", [RobustZDetector(), SpikeScoreDetector()], ids=lambda d: d.name
)
def test_point_detectors_find_a_one_step_spike(detector):
    values = loss_curve(2000, 3)
    values[1500] *= 1.5
    alarms = detector.detect(values, robust_baseline(values)).alarms
    assert [alarm.index for alarm in alarms] == [1500]


def test_nonfinite_point_is_an_alarm():
    values = loss_curve(300, 1)
    values[200] = np.nan
    alarms = RobustZDetector().detect(values, robust_baseline(values)).alarms
    assert [a.index for a in alarms] == [200] and alarms[0].score == float("inf")


def test_cusum_finds_a_persistent_upward_shift_and_its_start():
    rng = np.random.default_rng(0)
    values = 3.0 + 0.05 * rng.standard_normal(1000)
    values[600:] += 0.1  # a 2σ level shift, invisible to point detectors
    detection = CusumDetector().detect(values, robust_baseline(values))
    assert RobustZDetector().detect(values, robust_baseline(values)).alarms == []
    upward = [s for s in detection.shifts if s.after_mean > s.before_mean]
    assert upward and 590 <= upward[0].index <= 615


def test_pelt_finds_a_regime_shift():
    rng = np.random.default_rng(1)
    values = np.concatenate(
        [3.0 + 0.05 * rng.standard_normal(500), 3.6 + 0.05 * rng.standard_normal(500)]
    )
    shifts = PeltDetector().detect(values, robust_baseline(values)).shifts
    assert len(shifts) == 1 and abs(shifts[0].index - 500) <= 5
    assert shifts[0].after_mean == pytest.approx(3.6, abs=0.05)


def test_pelt_ignores_short_runs_and_flat_noise():
    rng = np.random.default_rng(2)
    assert PeltDetector().detect(np.ones(10), robust_baseline(np.ones(10))).shifts == []
    flat = 3 + 0.05 * rng.standard_normal(3000)
    assert PeltDetector().detect(flat, robust_baseline(flat)).shifts == []


def test_merged_spike_has_onset_peak_end_and_magnitude():
    values = loss_curve(500, 4)
    values[300:303] = [4.0, 6.0, 4.5]
    candidates = merge_alarms(
        values, [d.detect(values, robust_baseline(values)) for d in DETECTORS]
    )
    assert len(candidates) == 1
    spike = candidates[0]
    assert (spike.onset, spike.peak) == (300, 301)
    assert spike.end is not None and 303 <= spike.end <= 306
    assert spike.magnitude == pytest.approx((6.0 - spike.baseline) / spike.sigma)
    assert "robust_z" in spike.detectors


def test_short_100_step_run_is_a_real_case():
    run = bad_batch_run(steps=100, at=70, factor=2.0)
    spikes, _ = detect(run)
    loss_spikes = [s for s in spikes if s.metric == "train/loss"]
    assert [s.peak_step for s in loss_spikes] == [70]


@pytest.mark.parametrize("seed", range(4))
def test_stable_run_has_no_spikes(seed):
    spikes, _ = detect(stable_run(seed=seed))
    assert spikes == []


def test_sparse_series_is_not_filled():
    """An eval loss every 50 steps is scanned as 8 points, never filled with zeros."""
    run = stable_run()
    steps, values = run.series("train/loss")
    assert np.isfinite(values).all() and steps.size == 400


def test_spike_score_fraction():
    values = loss_curve(3000, 5)
    values[[1000, 2000]] *= 2
    assert spike_score(values) == pytest.approx(2 / 3000, rel=0.5)
