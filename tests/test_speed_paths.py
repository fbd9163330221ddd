"""The shortcuts issue 15 took on the analysis's hot paths give what the long way gives."""

from __future__ import annotations

import numpy as np
import pytest

from tests.synthetic import bad_batch_run, grad_norms, loss_curve, make_run, stable_run
from tscope.analyzers import one_step_breaks
from tscope.analyzers.baseline import robust_baseline
from tscope.analyzers.detect import DETECTORS
from tscope.analyzers.detectors.base import Alarm, Detection
from tscope.analyzers.detectors.neighbour_median import neighbour_medians
from tscope.analyzers.explainers import lr_ramp_shape
from tscope.ingest import assemble
from tscope.model import LogRead, MetricTable, Run
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE, LOSS
from tscope.model.metric_table import TextColumn


def test_run_series_is_a_read_only_view_of_one_cached_split():
    run = stable_run(steps=300)
    steps, values = run.series(LOSS)
    again = run.series(LOSS)
    assert again[0] is steps and again[1] is values  # no copy per call
    with pytest.raises(ValueError):
        values[0] = 0.0
    with pytest.raises(ValueError):
        np.add(steps, 1, out=steps)
    absent_steps, absent_values = run.series("no/such/metric")
    assert absent_steps.size == 0 and not absent_values.flags.writeable


@pytest.mark.parametrize("half", [1, 2, 5])
@pytest.mark.parametrize("size", [0, 3, 11, 12, 257])
def test_neighbour_medians_equal_the_median_of_each_neighbourhood(half, size):
    rng = np.random.default_rng(size + 10 * half)
    values = rng.standard_normal(size) * 1e3 + rng.choice([0.0, 3.0], size)
    medians = neighbour_medians(values, half)
    for i in range(size):
        if half <= i < size - half:
            around = np.r_[values[i - half : i], values[i + 1 : i + 1 + half]]
            assert medians[i] == np.median(around)  # the same arithmetic, bit for bit
        else:
            assert np.isnan(medians[i])


@pytest.mark.parametrize("half", [1, 2, 5])
@pytest.mark.parametrize("size", [0, 1, 3, 11, 257])
def test_partial_ends_take_the_median_of_the_neighbours_they_have(half, size):
    rng = np.random.default_rng(size + 10 * half)
    values = rng.standard_normal(size) * 1e3
    medians = neighbour_medians(values, half, partial_ends=True)
    for i in range(size):
        around = np.r_[values[max(0, i - half) : i], values[i + 1 : i + 1 + half]]
        if around.size:
            assert medians[i] == np.median(around)
        else:
            assert np.isnan(medians[i])  # a lone point has no neighbour


def _bumpy_run(seed: int) -> Run:
    """Loss and gradient norm with one-point breaks of every size, some of two points, and a
    NaN: what one_step_breaks' prefilter must pass and its rules sort out."""
    rng = np.random.default_rng(seed)
    loss, grads = loss_curve(600, seed), grad_norms(600, seed)
    at = rng.choice(np.arange(200, 590), 40, replace=False)
    loss[at] *= rng.uniform(1.0, 2.5, at.size)
    loss[at[:10] + 1] *= rng.uniform(1.0, 1.8, 10)  # breaks of two points
    grads[at[::2]] *= 5.0
    loss[300] = np.nan
    return make_run({LOSS: loss, GRAD_NORM: grads, LEARNING_RATE: np.full(600, 1e-3)})


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("min_ratio", [1.0, 1.1])
def test_one_step_breaks_are_those_of_the_loop_over_every_point(seed, min_ratio, monkeypatch):
    run = _bumpy_run(seed)
    fast = one_step_breaks.one_step_breaks(run, min_ratio)
    monkeypatch.setattr(
        one_step_breaks,
        "_break_candidates",
        lambda values, excess, first, ratio: range(first, values.size - 1),
    )
    every_point = one_step_breaks.one_step_breaks(run, min_ratio)
    assert len(fast) > 3 and any(b.grad_ratio is not None for b in fast)
    assert fast == every_point
    # Each break's gradient ratio is the one the whole series' neighbour medians give.
    steps, grads = run.series(GRAD_NORM)
    typical = neighbour_medians(grads, one_step_breaks.GRAD_NEIGHBOURS, partial_ends=True)
    for found in fast:
        index = int(np.flatnonzero(steps == found.step)[0])
        assert found.grad_ratio == float(grads[index] / typical[index])


def _warmup_peak_by_loop(lrs: np.ndarray) -> int | None:
    """lr_ramp_shape.warmup_peak_index as it was written, one index at a time."""
    running = np.maximum.accumulate(lrs)
    for index in range(1, lrs.size):
        if lrs[index] < running[index] * (1 - lr_ramp_shape.WARMUP_END_DROP):
            return int(np.argmax(lrs[: index + 1]))
        held = lrs[max(0, index - lr_ramp_shape.WARMUP_FLAT_POINTS) : index + 1]
        if (
            index >= lr_ramp_shape.WARMUP_FLAT_POINTS
            and running[index] > 0
            and np.ptp(held) <= 1e-9 * held[-1]
        ):
            return int(np.argmax(lrs[: index + 1]))
    return None


@pytest.mark.parametrize("seed", range(6))
def test_the_warmup_peak_is_where_the_loop_over_every_point_finds_it(seed):
    rng = np.random.default_rng(seed)
    schedules = [np.array([]), np.array([1e-3]), np.array([0.0, 0.0, 0.0, 0.0, 0.0])]
    for size in (2, 4, 5, 40, 400):
        warmup = np.minimum(np.arange(1, size + 1) / rng.integers(1, size + 1), 1.0) * 3e-4
        schedules += [
            warmup,  # climbs, then holds
            warmup * (1 + 0.02 * rng.standard_normal(size)),  # noisy: a 1% drop ends it
            np.round(warmup, 5),  # rounded as a log prints it: held before the peak
            np.cumsum(rng.uniform(0, 1e-4, size)),  # never ends
        ]
    for lrs in schedules:
        assert lr_ramp_shape.warmup_peak_index(lrs) == _warmup_peak_by_loop(lrs)


def test_a_detection_built_from_arrays_lists_the_same_alarms():
    listed = Detection("robust_z", alarms=[Alarm(3, 5.5), Alarm(7, float("inf"))])
    arrays = Detection("robust_z", index=np.array([3, 7]), score=np.array([5.5, np.inf]))
    assert arrays.alarms == listed.alarms
    for one, other in zip(arrays.alarm_arrays(), listed.alarm_arrays(), strict=True):
        assert np.array_equal(one, other)


@pytest.mark.parametrize("seed", range(3))
def test_alarms_are_the_same_without_regime_shifts(seed):
    run = bad_batch_run(seed=seed)
    for metric in (LOSS, GRAD_NORM):
        _, values = run.series(metric)
        baseline = robust_baseline(values)
        for detector in DETECTORS:
            full = detector.detect(values, baseline)
            alarms_only = detector.detect(values, baseline, with_shifts=False)
            assert alarms_only.alarms == full.alarms
            assert alarms_only.shifts == []


def test_a_read_only_series_baseline_is_computed_once_and_a_writeable_one_afresh():
    run = stable_run(steps=300)
    _, values = run.series(LOSS)
    assert robust_baseline(values) is robust_baseline(values)
    writeable = loss_curve(300, seed=1)
    first, second = robust_baseline(writeable), robust_baseline(writeable)
    assert first is not second
    assert np.array_equal(first.median, second.median, equal_nan=True)
    writeable[100] = 50.0  # the caller's array changed: its new baseline sees it
    assert robust_baseline(writeable).median[101] != first.median[101]


def test_the_smoothed_loss_of_a_read_only_series_is_computed_once():
    from tscope.analyzers.explainers.divergence import smoothed

    run = stable_run(steps=300)
    _, values = run.series(LOSS)
    first = smoothed(values)
    assert smoothed(values) is first and not first.flags.writeable
    fresh = smoothed(values.copy())  # a writeable array: computed again, the same numbers
    assert fresh is not first and np.array_equal(fresh, first)


def _wide_table(order: np.ndarray | None = None) -> MetricTable:
    """Three metrics column by column, as a wide CSV's reader builds them (`order` = row x 3 +
    column); the zeta column comes first in the file, so first-appearance is not name order."""
    rows = np.arange(40)
    table = MetricTable(
        np.concatenate([rows * 10, rows[5:] * 10, rows * 10]),
        TextColumn(np.repeat([0, 1, 2], [40, 35, 40]), ["zeta", "alpha", "mid"]),
        np.arange(115, dtype=np.float64),
        "metrics.csv",
        TextColumn(np.repeat([0, 1, 2], [40, 35, 40]), ["z", "a", "m"]),
        np.concatenate([rows * 3, rows[5:] * 3 + 1, rows * 3 + 2]) if order is None else order,
    )
    return table


def _split_the_long_way(table: MetricTable, monkeypatch: pytest.MonkeyPatch) -> dict:
    monkeypatch.setattr(assemble, "_metric_blocks", lambda _: None)
    read = LogRead("metrics_table", "metrics.csv", table)
    split = assemble._split_by_metric([read])[id(read)]
    monkeypatch.undo()
    return split


@pytest.mark.parametrize("shuffle", [False, True])
def test_split_by_metric_of_a_wide_table_is_that_of_the_sort_by_file_order(shuffle, monkeypatch):
    table = _wide_table()
    if shuffle:  # rows out of file order within a metric: the long way decides
        table = table.take(np.random.default_rng(0).permutation(len(table)))
    read = LogRead("metrics_table", "metrics.csv", table)
    fast = assemble._split_by_metric([read])[id(read)]
    slow = _split_the_long_way(table, monkeypatch)
    assert list(fast) == list(slow) == ["zeta", "mid", "alpha"]  # by first row in the file
    assert all(fast[metric].equals(slow[metric]) for metric in slow)
    assert (assemble._metric_blocks(table) is None) == shuffle


def test_take_of_consecutive_rows_is_the_copying_take():
    table = _wide_table()
    for rows in (np.arange(3, 50), np.arange(115) >= 100, np.array([7])):
        indices = np.flatnonzero(rows) if rows.dtype == bool else rows
        taken = table.take(rows)
        assert all(
            np.array_equal(taken[name], table[name][indices])
            for name in ("step", "metric", "value", "source", "original_name", "order")
        )
    with pytest.raises(IndexError):
        table.take(np.arange(110, 120))  # past the end: numpy's error, not a shorter table
