"""Detector loops compiled with numba (the optional `fast` extra) that decide exactly as numpy.

- `compiled_pelt`: generic_segments.pelt. On a series without changes almost nothing is pruned,
  so each of its n steps runs ~30 numpy calls over a growing array (0.3–0.7 s for the 2,000
  points of one series on a loaded core, the largest single cost of a 10,000-step run's analysis).
- `compiled_cusum`: cusum._one_sided_cusum and the window median of every excursion. A series
  that re-arms the CUSUM every few points (a smooth curve whose robust sigma is floored) has
  ~n/3 excursions, and the numpy version pays several numpy calls for each.

Same decisions, bit for bit: every value is the same sequence of IEEE operations as the numpy
expression (numba compiles without fast-math, so nothing is reassociated or fused; np.cumsum and
np.minimum.accumulate are sequential left-to-right sums and minima, repeated here with the same
chunk boundaries), the first of equal minima wins as with np.argmin, and a median is the same
order statistic(s) plus +0.0 as baseline._median. tests/test_compiled_loops.py compares both with
`==` on random series, planted steps and slopes, and the fixtures' series. Without numba, or for
short series (where importing numba and loading the cached kernels costs more than it saves), the
detectors use their numpy code.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
from collections.abc import Callable
from functools import cache
from typing import Any

import numpy as np

# Below this many points the numpy loops take a few milliseconds: not worth importing numba
# (0.3–0.5 s on a quiet core) and loading the cached kernels in a short run's process.
COMPILED_MIN_POINTS = 200

Kernel = Callable[..., float]


def _search(
    data: Any, linear: bool, n: int, min_size: int, penalty: float, best: Any, previous: Any
) -> float:
    """generic_segments.pelt's loop; `data` holds the prefix sums its cost closure uses:
    rows s1, s2 (constant) or t, t², y, t·y, y² (linear)."""
    admissible = np.empty(n + 1, dtype=np.int64)
    totals = np.empty(n + 1, dtype=np.float64)
    admissible[0] = 0
    count = 1
    best[0] = -penalty
    for end in range(min_size, n + 1):
        # The admissible starts are ascending, so those at least min_size back are a prefix.
        usable = 0
        while usable < count and end - admissible[usable] >= min_size:
            usable += 1
        if usable == 0:
            continue
        chosen, nan_seen = 0, False
        for i in range(usable):
            start = admissible[i]
            length = end - start
            if linear:
                st = data[0, end] - data[0, start]
                stt = data[1, end] - data[1, start]
                sy = data[2, end] - data[2, start]
                sty = data[3, end] - data[3, start]
                syy = data[4, end] - data[4, start]
                var_t = stt - st * st / length
                cov = sty - st * sy / length
                residual = syy - sy * sy / length
                explained = cov * cov / var_t if var_t > 0 else 0.0
                cost = residual - explained
            else:
                total = data[0, end] - data[0, start]
                cost = (data[1, end] - data[1, start]) - total * total / length
            if cost < 0.0:  # np.maximum(cost, 0.0): a NaN or a -0.0 stays as it is
                cost = 0.0
            value = best[start] + cost + penalty
            totals[i] = value
            # np.argmin: the first NaN if there is one, else the first of equal minima.
            if not nan_seen:
                if value != value:
                    chosen, nan_seen = i, True
                elif value < totals[chosen]:
                    chosen = i
        best[end] = totals[chosen]
        previous[end] = admissible[chosen]
        threshold = best[end] + penalty
        kept = 0
        for i in range(usable):
            if totals[i] <= threshold:
                admissible[kept] = admissible[i]
                kept += 1
        for i in range(usable, count):  # still too close to `end` to be scored: kept
            admissible[kept] = admissible[i]
            kept += 1
        admissible[kept] = end
        count = kept + 1
    return best[n]  # type: ignore[no-any-return]


def _cusum_scan(residuals: Any, reference: float, decision: float, chunk: int, found: Any) -> int:
    """cusum._one_sided_cusum: rows (excursion start, alarm index) of `found` as floats and the
    sum at the alarm; returns how many rows were filled. A chunk runs from `position` for up to
    `chunk` points and restarts after each alarm, as in numpy (its 64-point first look sees the
    same prefix sums as the whole chunk, so the whole chunk is what it decides on)."""
    total_points = residuals.size
    position, carried, excursion_start, count = 0, 0.0, 0, 0
    while position < total_points:
        length = min(chunk, total_points - position)
        cumulative, running_min, last = 0.0, 0.0, 0.0
        crossing, last_zero = -1, -1
        for j in range(length):
            step = residuals[position + j] - reference
            cumulative = step if j == 0 else cumulative + step
            running_min = cumulative if j == 0 else min(running_min, cumulative)
            last = cumulative - min(running_min, -carried)
            if last > decision:
                crossing = j
                break
            if last <= 0.0:
                last_zero = j
        if crossing < 0:
            if last_zero >= 0:
                excursion_start = position + last_zero + 1
            carried = last
            position += length
            continue
        if last_zero >= 0:
            excursion_start = position + last_zero + 1
        found[count, 0] = excursion_start
        found[count, 1] = position + crossing
        found[count, 2] = last
        count += 1
        position += crossing + 1
        carried, excursion_start = 0.0, position
    return count


def _window_medians(values: Any, lows: Any, highs: Any, medians: Any) -> None:
    """baseline.window_stats(values[low:high])[0] for every window: the median of its finite
    points (NaN if none), the middle one or the mean of the two middle ones, after +0.0."""
    for w in range(lows.size):
        window = values[lows[w] : highs[w]]
        finite = np.sort(window[np.isfinite(window)])
        size = finite.size
        if size == 0:
            medians[w] = np.nan
        elif size % 2:
            medians[w] = 0.0 + finite[size // 2]
        else:
            medians[w] = (0.0 + finite[size // 2 - 1] + finite[size // 2]) / 2


def _rolling_median(values: Any, window: int, min_periods: int, medians: Any) -> None:
    """pandas' Series.rolling(window, min_periods).median() (roll_median_c): the median of the
    finite points among the last `window` (pandas treats ±inf as missing too), NaN below
    min_periods; a sorted buffer where pandas keeps a skiplist, the same order statistics and the
    same (upper + lower) / 2 of the two middle ones."""
    ordered = np.empty(window + 1, dtype=np.float64)  # one more: a point joins before one leaves
    count = 0
    for i in range(values.size):
        value = values[i]
        if np.isfinite(value):
            # After its equals, as pandas' skiplist inserts (and it removes the first equal):
            # the order of 0.0 and -0.0, hence the sign of a zero median, is pandas' too.
            at = np.searchsorted(ordered[:count], value, side="right")
            for k in range(count, at, -1):  # shifted in place: no array per point
                ordered[k] = ordered[k - 1]
            ordered[at] = value
            count += 1
        if i >= window:
            leaving = values[i - window]
            if np.isfinite(leaving):
                at = np.searchsorted(ordered[:count], leaving)
                for k in range(at, count - 1):
                    ordered[k] = ordered[k + 1]
                count -= 1
        if count >= min_periods and count > 0:
            middle = count // 2
            if count % 2:
                medians[i] = ordered[middle]
            else:
                medians[i] = (ordered[middle] + ordered[middle - 1]) / 2
        else:
            medians[i] = np.nan


def _rolling_mean_std(values: Any, window: int, min_periods: int, means: Any, stds: Any) -> None:
    """pandas' Series.rolling(window, min_periods).mean() and .std() (roll_mean; roll_var with
    ddof 1, then zsqrt) of a series whose ±inf are already NaN: the same IEEE operations in the
    same order (pandas 3's aggregations.pyx), so the same numbers, sign of zero included. Each
    window drops the point leaving, then adds the new one. The mean keeps separate Kahan
    compensations for adds and removes and pandas' repeated-value correction (equal points in a
    row, counted as they are added); the variance is Welford's update with one compensation,
    and a window where an update lost all but ~3 digits (M2 shrank below 1e3·eps of its value)
    is recomputed from its points, as pandas does."""
    count = negative = 0  # roll_mean's nobs and neg_ct
    total = add_compensation = remove_compensation = 0.0
    same = 0
    previous = values[0] if values.size else 0.0
    # roll_var: [nobs, mean, M2, compensation of adds, unstable]; removes keep their own
    # compensation (pandas' compensation_remove).
    state = np.zeros(5, dtype=np.float64)
    remove_var_compensation = 0.0
    minimum_var_points = max(min_periods, 1)

    def add_var(value: float, state: Any) -> None:
        """pandas' add_var on state [nobs, mean, M2, Kahan compensation, unstable flag]."""
        if value != value:
            return
        previous_squares = state[2]
        state[0] += 1.0
        previous_mean = state[1] - state[3]
        y = value - state[3]
        t = y - state[1]
        state[3] = t + state[1] - y
        state[1] = state[1] + t / state[0]
        state[2] = state[2] + (value - previous_mean) * (value - state[1])
        if previous_squares * _INVERSE_CONDITION_TOLERANCE > state[2]:
            state[4] = 1.0  # possible catastrophic cancellation: pandas recomputes the window

    for i in range(values.size):
        if i >= window:
            leaving = values[i - window]
            if leaving == leaving:  # not NaN: remove_mean, remove_var
                count -= 1
                y = -leaving - remove_compensation
                t = total + y
                remove_compensation = t - total - y
                total = t
                if np.signbit(leaving):
                    negative -= 1
                previous_squares = state[2]
                state[0] -= 1.0
                if state[0] != 0.0:
                    previous_mean = state[1] - remove_var_compensation
                    y = leaving - remove_var_compensation
                    t = y - state[1]
                    remove_var_compensation = t + state[1] - y
                    state[1] = state[1] - t / state[0]
                    state[2] = state[2] - (leaving - previous_mean) * (leaving - state[1])
                    if previous_squares * _INVERSE_CONDITION_TOLERANCE > state[2]:
                        state[4] = 1.0
                else:
                    state[1] = 0.0
                    state[2] = 0.0
                    state[4] = 0.0
        value = values[i]
        if value == value:  # add_mean
            count += 1
            y = value - add_compensation
            t = total + y
            add_compensation = t - total - y
            total = t
            if np.signbit(value):
                negative += 1
            same = same + 1 if value == previous else 1
            previous = value
        if i == 0:
            add_var(value, state)
            state[4] = 0.0
        else:
            add_var(value, state)
            if state[4] != 0.0:  # recompute the window [i + 1 - window, i] from scratch
                state[:] = 0.0
                remove_var_compensation = 0.0
                for j in range(max(0, i + 1 - window), i + 1):
                    add_var(values[j], state)
                state[4] = 0.0
        if count >= min_periods and count > 0:  # calc_mean
            mean = total / count
            if same >= count:
                mean = previous
            elif (negative == 0 and mean < 0) or (negative == count and mean > 0):
                mean = 0.0
            means[i] = mean
        else:
            means[i] = np.nan
        if state[0] >= minimum_var_points and state[0] > 1.0:  # calc_var, then zsqrt
            variance = state[2] / (state[0] - 1.0)
            stds[i] = 0.0 if variance < 0.0 else np.sqrt(variance)
        else:
            stds[i] = np.nan


# pandas' InvCondTol: an update is ill-conditioned when M2 keeps fewer than ~3 significant digits.
_INVERSE_CONDITION_TOLERANCE = float(np.finfo(np.float64).eps) * 1e3


def _ranked_rolling_median(
    values: Any, order: Any, window: int, min_periods: int, medians: Any
) -> None:
    """_rolling_median for any window in O(n log n): the window's finite points are counted in a
    Fenwick tree over their ranks in `order` (a stable argsort of values), and the middle
    order statistic(s) found by binary lifting. Ranks order equal values (0.0 and -0.0) by
    arrival, as pandas' skiplist does (a point is inserted after its equals; the one leaving is
    the oldest, the first of its equals), so the median and the sign of a zero median are
    pandas'. A sorted buffer shifts up to `window` floats per point: fine for windows of a
    few hundred, 10^9 moves for a 25,000-point window over 250,000 points."""
    size = values.size
    rank = np.empty(size, dtype=np.int64)
    for position in range(size):
        rank[order[position]] = position
    tree = np.zeros(size + 1, dtype=np.int64)  # 1-based Fenwick tree of counts per rank
    top = 1
    while top * 2 <= size:
        top *= 2
    count = 0
    for i in range(size):
        value = values[i]
        if np.isfinite(value):
            node = rank[i] + 1
            while node <= size:
                tree[node] += 1
                node += node & -node
            count += 1
        if i >= window:
            leaving = i - window
            if np.isfinite(values[leaving]):
                node = rank[leaving] + 1
                while node <= size:
                    tree[node] -= 1
                    node += node & -node
                count -= 1
        if count >= min_periods and count > 0:
            middle = count // 2
            found = np.empty(2, dtype=np.float64)  # the k-th smallest for k = middle, middle - 1
            for slot in range(2 if count % 2 == 0 else 1):
                remaining = middle - slot + 1  # 1-based order statistic
                position = 0
                step = top
                while step > 0:
                    probe = position + step
                    if probe <= size and tree[probe] < remaining:
                        position = probe
                        remaining -= tree[probe]
                    step //= 2
                found[slot] = values[order[position]]
            if count % 2:
                medians[i] = found[0]
            else:
                medians[i] = (found[0] + found[1]) / 2
        else:
            medians[i] = np.nan


_PYTHON_LOOPS: dict[str, Callable[..., Any]] = {
    "rolling_median": _rolling_median,
    "pelt": _search,
    "cusum": _cusum_scan,
    "window_medians": _window_medians,
    "rolling_mean_std": _rolling_mean_std,
    "ranked_rolling_median": _ranked_rolling_median,
}


def compiled_loops_available() -> bool:
    """Whether kernel() can compile (numba installed, TSCOPE_COMPILED_LOOPS not 0), without
    importing numba: the pipeline decides from it which heavy modules to import up front."""
    if os.environ.get("TSCOPE_COMPILED_LOOPS") == "0":
        return False
    return importlib.util.find_spec("numba") is not None


@cache
def kernel(name: str = "pelt") -> Kernel | None:
    """One of _PYTHON_LOOPS compiled (numba caches the machine code next to this module), or
    None without numba or with TSCOPE_COMPILED_LOOPS=0 (the numpy code: benchmarks compare)."""
    if not compiled_loops_available():
        return None
    try:
        numba: Any = importlib.import_module("numba")
    except ImportError:  # the optional `fast` extra is not installed
        return None
    compiled: Kernel = numba.njit(cache=True, nogil=True)(_PYTHON_LOOPS[name])
    return compiled


def compiled_pelt(
    model: str, data: np.ndarray, n: int, min_size: int, penalty: float
) -> tuple[list[int], float] | None:
    """generic_segments.pelt's (segment starts after the first, total) for `model` on the
    prefix-sum rows `data`, or None when the compiled kernels are not available."""
    search = kernel("pelt")
    if search is None:
        return None
    best = np.full(n + 1, np.inf)
    previous = np.zeros(n + 1, dtype=np.int64)
    total = search(data, model == "linear", n, min_size, float(penalty), best, previous)
    breaks = []
    end = n
    while end > 0:
        end = int(previous[end])
        if end > 0:
            breaks.append(end)
    return sorted(breaks), float(total)


def compiled_cusum(
    residuals: np.ndarray, reference: float, decision: float, chunk: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """cusum._one_sided_cusum's excursions as arrays (starts, alarm indices, sums at the
    alarms), or None when numba is not available."""
    scan = kernel("cusum")
    if scan is None:
        return None
    found = np.empty((residuals.size, 3), dtype=np.float64)
    contiguous = np.ascontiguousarray(residuals, dtype=np.float64)
    count = int(scan(contiguous, float(reference), float(decision), int(chunk), found))
    rows = found[:count]
    return rows[:, 0].astype(np.int64), rows[:, 1].astype(np.int64), rows[:, 2].copy()


def compiled_window_medians(
    values: np.ndarray, lows: np.ndarray, highs: np.ndarray
) -> np.ndarray | None:
    """The median of the finite points of each values[low:high], or None without numba."""
    medians_of = kernel("window_medians")
    if medians_of is None:
        return None
    medians = np.empty(lows.size, dtype=np.float64)
    medians_of(
        np.ascontiguousarray(values, dtype=np.float64),
        np.ascontiguousarray(lows, dtype=np.int64),
        np.ascontiguousarray(highs, dtype=np.int64),
        medians,
    )
    return medians


def compiled_rolling_median(values: np.ndarray, window: int, min_periods: int) -> np.ndarray | None:
    """pd.Series(values).rolling(window, min_periods).median().to_numpy(), or None without
    numba."""
    median_of = kernel("rolling_median")
    if median_of is None:
        return None
    medians = np.empty(values.size, dtype=np.float64)
    median_of(
        np.ascontiguousarray(values, dtype=np.float64), int(window), int(min_periods), medians
    )
    return medians


def compiled_rolling_mean_std(
    values: np.ndarray, window: int, min_periods: int
) -> tuple[np.ndarray, np.ndarray] | None:
    """pd.Series(values).rolling(window, min_periods) .mean() and .std() as arrays (±inf already
    NaN), or None without numba."""
    mean_std_of = kernel("rolling_mean_std")
    if mean_std_of is None:
        return None
    means = np.empty(values.size, dtype=np.float64)
    stds = np.empty(values.size, dtype=np.float64)
    mean_std_of(
        np.ascontiguousarray(values, dtype=np.float64), int(window), int(min_periods), means, stds
    )
    return means, stds


def compiled_ranked_rolling_median(
    values: np.ndarray, window: int, min_periods: int
) -> np.ndarray | None:
    """compiled_rolling_median for long windows (O(n log n) whatever the window), or None
    without numba."""
    median_of = kernel("ranked_rolling_median")
    if median_of is None:
        return None
    contiguous = np.ascontiguousarray(values, dtype=np.float64)
    order = np.argsort(contiguous, kind="stable")  # equal values (±0) in arrival order
    medians = np.empty(values.size, dtype=np.float64)
    median_of(contiguous, order, int(window), int(min_periods), medians)
    return medians
