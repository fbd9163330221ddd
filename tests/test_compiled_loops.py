"""The compiled detector loops decide exactly as the numpy code they replace on long series.

Each compiled loop (analyzers/detectors/compiled_loops.py) is compared with `==` against the numpy
version kept as the fallback: PELT's breakpoints and optimal total, CUSUM's excursions, the window
medians, and whole detections with the compiled path switched off. merge_alarms (vectorized) is
compared with the dict-based merge it replaced, written out here as the reference.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from tscope.analyzers.baseline import robust_baseline, window_stats
from tscope.analyzers.detectors import cusum, generic_segments, merge
from tscope.analyzers.detectors.base import Alarm, Detection
from tscope.analyzers.detectors.cusum import (
    CUSUM_DECISION_SIGMA,
    CUSUM_REFERENCE_SIGMA,
    CusumDetector,
    _one_sided_cusum,
)
from tscope.analyzers.detectors.generic_segments import (
    _constant_cost,
    _constant_prefix,
    _linear_cost,
    _linear_prefix,
    pelt,
    series_change_points,
)

pytest.importorskip("numba")

from tscope.analyzers.detectors.compiled_loops import (
    compiled_cusum,
    compiled_pelt,
    compiled_window_medians,
)


def _series(rng: np.random.Generator, kind: int, n: int) -> np.ndarray:
    """Noise, steps, slopes, NaN/Inf points, a noiseless curve, rounded ties, flat stretches."""
    x = 3.0 + 0.05 * rng.standard_normal(n)
    if kind == 1:
        x += np.repeat(rng.normal(0, 0.3, 6), -(-n // 6))[:n]
    elif kind == 2:
        x += np.linspace(0, rng.normal(0, 2), n)
    elif kind == 3:
        x[rng.random(n) < 0.05] = np.nan
    elif kind == 4:
        x = np.sin(np.arange(n) * 1e-3) + 2.0  # re-arms the CUSUM every few points
    elif kind == 5:
        x = np.round(x, 2)
        x[rng.random(n) < 0.01] = np.inf
    elif kind == 6:
        x = np.where(rng.random(n) < 0.5, 1.0, x)
    return x


@pytest.mark.parametrize("seed", range(4))
def test_pelt_same_breakpoints_and_total(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for kind in (0, 1, 2, 4, 6):
        x = _series(rng, kind, int(rng.integers(200, 600)))
        for model, prefix in (("constant", _constant_prefix(x)), ("linear", _linear_prefix(x))):
            cost = _constant_cost(*prefix) if model == "constant" else _linear_cost(*prefix)
            for min_size, penalty in ((5, 3.0 * 0.05**2 * math.log(x.size)), (2, 1e-4), (7, 0.0)):
                expected = pelt(cost, x.size, min_size, penalty)
                got = compiled_pelt(model, np.vstack(prefix), x.size, min_size, penalty)
                assert got == expected, (kind, model, min_size, penalty)


def test_series_change_points_same_with_and_without_the_kernel(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = np.random.default_rng(7)
    series = [np.exp(_series(rng, kind, 500)) for kind in (0, 1, 2, 6)]
    compiled = [series_change_points(x) for x in series]
    assert any(breaks for breaks, _ in compiled)  # planted steps are found: not a vacuous check
    monkeypatch.setattr(generic_segments, "compiled_pelt", lambda *args: None)
    assert [series_change_points(x) for x in series] == compiled


@pytest.mark.parametrize("seed", range(4))
def test_cusum_same_excursions(seed: int) -> None:
    rng = np.random.default_rng(seed)
    for kind in range(7):
        x = _series(rng, kind, int(rng.integers(200, 5000)))
        residuals = np.clip(np.nan_to_num(robust_baseline(x).zscores(x), nan=0.0), -3, 3)
        for sign in (1.0, -1.0):
            expected = _one_sided_cusum(
                sign * residuals, CUSUM_REFERENCE_SIGMA, CUSUM_DECISION_SIGMA
            )
            found = compiled_cusum(
                sign * residuals, CUSUM_REFERENCE_SIGMA, CUSUM_DECISION_SIGMA, 1024
            )
            assert found is not None
            got = list(zip(*(part.tolist() for part in found), strict=True))
            assert got == expected, (kind, sign)


def test_window_medians_match_window_stats() -> None:
    rng = np.random.default_rng(3)
    values = rng.standard_normal(3000)
    values[rng.random(3000) < 0.1] = np.nan
    values[rng.random(3000) < 0.02] = -np.inf
    values[100:140] = np.nan  # windows without a finite point
    values[500:560] = 0.0  # ties, zeros
    lows = rng.integers(0, 2900, 400)
    highs = lows + rng.integers(1, 100, 400)
    got = compiled_window_medians(values, lows, highs)
    assert got is not None
    for low, high, median in zip(lows, highs, got, strict=True):
        expected = window_stats(values[low:high])[0]
        assert median == expected or (math.isnan(median) and math.isnan(expected))


def _same_detection(a: Detection, b: Detection) -> bool:
    def shifts(d: Detection) -> list[tuple[int, float, str]]:
        return [(s.index, s.before_mean, repr(s.after_mean)) for s in d.shifts]

    return a.alarms == b.alarms and shifts(a) == shifts(b)


@pytest.mark.parametrize("kind", range(7))
def test_cusum_detection_same_with_and_without_the_kernels(
    kind: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    x = _series(np.random.default_rng(kind), kind, 20_000)
    baseline = robust_baseline(x)
    compiled = CusumDetector().detect(x, baseline)
    assert compiled.alarms  # every kind re-arms the CUSUM at least once in 20,000 points
    monkeypatch.setattr(cusum, "compiled_cusum", lambda *args: None)
    monkeypatch.setattr(cusum, "compiled_window_medians", lambda *args: None)
    assert _same_detection(CusumDetector().detect(x, baseline), compiled)


def _reference_merge(values: np.ndarray, detections: list[Detection]) -> list[object]:
    """merge_alarms as it was written before vectorizing: a dict entry per alarm."""
    flagged: dict[int, set[str]] = {}
    scores: dict[tuple[int, str], float] = {}
    for detection in detections:
        for alarm in detection.alarms:
            if alarm.score > 0:
                flagged.setdefault(alarm.index, set()).add(detection.detector)
                scores[(alarm.index, detection.detector)] = alarm.score
    if not flagged:
        return []
    indices = sorted(flagged)
    groups: list[list[int]] = [[indices[0]]]
    for index in indices[1:]:
        if index - groups[-1][-1] <= merge.MERGE_GAP_POINTS:
            groups[-1].append(index)
        else:
            groups.append([index])
    candidates: list[object] = []
    for group in groups:
        names = set().union(*(flagged[i] for i in group))
        if not names.intersection(merge.POINT_DETECTORS):
            continue
        candidate = merge._describe(values, group, names)
        if candidate is None:
            continue
        for detector in merge.POINT_DETECTORS:
            finite = [
                scores[(i, detector)]
                for i in group
                if (i, detector) in scores and np.isfinite(scores[(i, detector)])
            ]
            if finite:
                candidate = replace(candidate, alarm_score=max(finite), alarm_detector=detector)
                break
        candidates.append(candidate)
    return candidates


@pytest.mark.parametrize("seed", range(3))
def test_merge_alarms_same_as_the_dict_merge(seed: int) -> None:
    from tscope.analyzers.detect import DETECTORS

    rng = np.random.default_rng(seed)
    for kind in range(7):
        x = _series(rng, kind, int(rng.integers(500, 8000)))
        spiked = rng.random(x.size) < 0.003
        x[spiked] *= rng.uniform(1.2, 5.0, int(spiked.sum()))
        baseline = robust_baseline(x)
        detections = [detector.detect(x, baseline) for detector in DETECTORS]
        # Unsorted, repeated, negative, NaN and infinite alarms, and a detector named twice.
        extra = [
            Alarm(int(i), float(rng.choice([1.0, 7.0, np.inf, -2.0, np.nan])))
            for i in rng.integers(0, x.size, 40)
        ]
        detections += [Detection("robust_z", alarms=extra), Detection("cusum", alarms=extra[::-1])]
        expected = _reference_merge(x, detections)
        assert expected
        assert [repr(c) for c in merge.merge_alarms(x, detections)] == [repr(c) for c in expected]


def test_cusum_shift_window_stops_at_the_next_change_the_other_way() -> None:
    """A drop followed by a blow-up: the drop's level is measured before the blow-up."""
    x = np.concatenate([np.full(300, 3.0), np.full(30, 2.0), np.full(300, 50.0)])
    x = x + 0.01 * np.random.default_rng(0).standard_normal(x.size)
    detection = CusumDetector().detect(x, robust_baseline(x))
    falling = [s for s in detection.shifts if s.after_mean < s.before_mean]
    assert falling and abs(falling[0].after_mean - 2.0) < 0.1


# Short windows take the sorted buffer, long ones the rank-counting loop (SORTED_BUFFER_MAX_WINDOW); a
# window longer than the series too.
@pytest.mark.parametrize(
    ("window", "min_periods"),
    [(50, 8), (5, 1), (1, 1), (11, 11), (128, 1), (300, 300), (1000, 8), (5000, 1)],
)
def test_rolling_median_same_as_pandas(window: int, min_periods: int) -> None:
    import pandas as pd

    from tscope.analyzers.detectors.compiled_loops import compiled_rolling_median

    rng = np.random.default_rng(window)
    for decimals in (0, 1, 3):  # rounding makes ties and both signs of zero
        x = np.round(rng.standard_normal(3000), decimals)
        x[rng.random(3000) < 0.1] = np.nan
        x[rng.random(3000) < 0.02] = np.inf  # missing for pandas' rolling too
        x[1000:1100] = np.nan  # fewer than min_periods points
        expected = pd.Series(x).rolling(window, min_periods=min_periods).median().to_numpy()
        got = compiled_rolling_median(x, window, min_periods)
        assert got is not None
        assert np.array_equal(got, expected, equal_nan=True)
        assert np.array_equal(np.signbit(got), np.signbit(expected))


def _same_bits(expected: np.ndarray, got: np.ndarray) -> bool:
    """Equal values, NaN where NaN, and the same sign of every zero."""
    return bool(
        np.array_equal(expected, got, equal_nan=True)
        and np.array_equal(np.signbit(expected), np.signbit(got))
    )


def _awkward_series(rng: np.random.Generator, size: int, kind: int) -> np.ndarray:
    if kind == 0:  # spikes of 1e6-1e13 leave the window: pandas' M2 loses its digits, recomputes
        values = rng.normal(size=size) * 1e-3
        values[rng.integers(0, size, 5)] = 10.0 ** rng.integers(6, 14, 5)
    elif kind == 1:  # ties, both zeros and a constant stretch (the repeated-value corrections)
        values = rng.choice([0.0, -0.0, 0.7, -1.0, 2.5], size)
        values[size // 4 : size // 2] = 0.7
    elif kind == 2:  # a large offset: cancellation in the running mean
        values = 1e8 + rng.normal(size=size)
    else:  # a decaying loss curve
        values = np.exp(-np.arange(size) / 50.0) + rng.normal(size=size) * 1e-3
    values[rng.random(size) < 0.1] = np.nan
    return values


def test_rolling_mean_std_same_as_pandas() -> None:
    """spike_score's rolling mean and std over the previous 1,000 points come from the compiled
    loop on long series (no pandas import): pandas' numbers bit for bit, its recompute of a
    numerically unstable window included. The loop follows pandas 3's rolling algorithm; pandas 2
    (Python 3.10, where pandas 3 does not install) may differ in the last bits, so the bit-for-bit
    comparison is made against pandas 3 only."""
    import pandas as pd

    if int(pd.__version__.split(".")[0]) < 3:
        pytest.skip("the compiled rolling mean/std follows pandas 3's algorithm")

    from tscope.analyzers.detectors.compiled_loops import compiled_rolling_mean_std

    rng = np.random.default_rng(5)
    for trial in range(120):
        size = int(rng.integers(0, 4000))
        window = int(rng.choice([1, 7, 50, 333, 1000]))
        min_periods = int(rng.integers(0, window + 1))
        values = _awkward_series(rng, size, trial % 4)
        rolling = pd.Series(values).rolling(window, min_periods=min_periods)
        got = compiled_rolling_mean_std(values, window, min_periods)
        assert got is not None
        assert _same_bits(rolling.mean().to_numpy(), got[0]), trial
        assert _same_bits(rolling.std().to_numpy(), got[1]), trial


def test_ranked_rolling_median_same_as_pandas() -> None:
    """The rank-counting rolling median (grad_norm's window is a tenth of the run, too long for
    the sorted buffer) gives pandas' skiplist medians, the sign of a zero median included."""
    import pandas as pd

    from tscope.analyzers.detectors.compiled_loops import compiled_ranked_rolling_median

    rng = np.random.default_rng(6)
    for trial in range(200):
        size = int(rng.integers(0, 3000))
        window = int(rng.integers(1, 1500))
        min_periods = int(rng.integers(0, window + 1))
        values = _awkward_series(rng, size, trial % 4)
        values[rng.random(size) < 0.03] = np.inf  # missing for pandas' rolling too
        values[rng.random(size) < 0.03] = -np.inf
        expected = pd.Series(values).rolling(window, min_periods=min_periods).median()
        got = compiled_ranked_rolling_median(values, window, min_periods)
        assert got is not None
        assert _same_bits(expected.to_numpy(), got), trial


_FIRST_KERNEL_CALL = """
import sys
import numpy as np
from tscope.analyzers.detectors.compiled_loops import compiled_cusum
from tscope.analyzers.detectors.cusum import _CUSUM_CHUNK, _one_sided_cusum

residuals = np.random.default_rng(4).standard_normal(3000).cumsum() / 30
starts, alarms, sums = compiled_cusum(residuals, 0.5, 4.0, _CUSUM_CHUNK)
listed = _one_sided_cusum(residuals, 0.5, 4.0)
assert [tuple(row) for row in zip(starts.tolist(), alarms.tolist(), sums.tolist())] == listed
assert listed
print(sorted(name for name in ("cffi", "scipy.linalg") if name in sys.modules))
import cffi, scipy.linalg  # not importable only while numba's target initialized
print("imported afterwards")
"""


def test_first_kernel_call_leaves_out_scipy_and_cffi_then_they_import() -> None:
    """analyzers/detectors/numba_target.py: the process's first kernel call initializes numba's
    target without scipy.linalg and cffi, decides as the numpy code, and both import after."""
    root = Path(__file__).resolve().parent.parent
    environment = dict(os.environ, PYTHONPATH=os.pathsep.join([str(root), str(root / "tests")]))
    environment.pop("TSCOPE_COMPILED_LOOPS", None)
    child = subprocess.run(
        [sys.executable, "-c", _FIRST_KERNEL_CALL],
        capture_output=True,
        text=True,
        env=environment,
        check=False,
    )
    assert child.returncode == 0, child.stderr
    assert child.stdout.splitlines() == ["[]", "imported afterwards"]


def _change_points_loop(metric: str, steps: np.ndarray, detections: list[Detection]) -> list:
    """detect._change_points as it was written before the shifts became arrays: the reference."""
    from tscope.analyzers.detect import SHIFT_MERGE_POINTS, _largest
    from tscope.model import ChangePoint

    found = []
    for detection in detections:
        last_index: dict[bool, int] = {}
        for shift in sorted(detection.shifts, key=lambda s: s.index):
            rising = shift.after_mean > shift.before_mean
            previous = last_index.get(rising)
            last_index[rising] = shift.index
            if previous is not None and shift.index - previous <= SHIFT_MERGE_POINTS:
                continue
            found.append(
                ChangePoint(
                    metric,
                    int(steps[shift.index]),
                    detection.detector,
                    shift.before_mean,
                    shift.after_mean,
                )
            )
    return _largest(found)


@pytest.mark.parametrize("seed", range(6))
def test_change_points_from_shift_arrays_match_the_loop(seed: int) -> None:
    from tscope.analyzers.detect import _change_points
    from tscope.analyzers.detectors.base import RegimeShift

    rng = np.random.default_rng(seed)
    n = 5000
    steps = np.cumsum(rng.integers(1, 4, n))
    count = int(rng.integers(0, 400))
    index = rng.integers(0, n, count)  # unsorted, with repeats
    before = rng.normal(3.0, 1.0, count)
    after = before + rng.normal(0.0, 1.0, count) * rng.choice([0.0, 1.0], count, p=[0.1, 0.9])
    after[rng.random(count) < 0.05] = np.nan
    as_arrays = Detection("cusum", shift_arrays=(index, before, after))
    as_list = Detection(
        "pelt",
        shifts=[
            RegimeShift(int(i), float(b), float(a))
            for i, b, a in zip(index[::-1], before[::-1], after[::-1], strict=True)
        ],
    )
    for detections in ([as_arrays], [as_list], [as_arrays, as_list]):
        got = _change_points("train/loss", steps, detections)
        expected = _change_points_loop("train/loss", steps, detections)
        assert [repr(point) for point in got] == [repr(point) for point in expected]  # NaN too
    assert [shift.index for shift in as_arrays.shifts] == index.tolist()
