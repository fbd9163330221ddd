"""The rolling-statistics loops that compiled_loops compiles with numba: pandas' rolling median,
mean and std over a series, the same IEEE operations in the same order, so the same numbers
(tests/test_compiled_loops.py, tests/test_rolling_median.py compare them with pandas bit for bit).

Plain Python over numpy arrays, written for numba's nopython mode; compiled_loops keeps the
registry (`kernel`) and the wrappers that allocate the outputs and fall back without numba.
"""

from __future__ import annotations

from typing import Any

import numpy as np


def rolling_median_loop(values: Any, window: int, min_periods: int, medians: Any) -> None:
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
            # the order of 0.0 and -0.0, hence the sign of a zero median, is pandas' too. One
            # pass from the end finds the place and shifts the larger ones up (an insertion
            # sort's step; a third faster than a binary search then a shift over 50 points).
            at = count
            while at > 0 and ordered[at - 1] > value:
                ordered[at] = ordered[at - 1]
                at -= 1
            ordered[at] = value
            count += 1
        if i >= window:
            leaving = values[i - window]
            if np.isfinite(leaving):
                # The first point not below it (np.searchsorted's side="left"), by bisection.
                low, high = 0, count
                while low < high:
                    middle = (low + high) // 2
                    if ordered[middle] < leaving:
                        low = middle + 1
                    else:
                        high = middle
                for k in range(low, count - 1):
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


def rolling_mean_std_loop(
    values: Any, window: int, min_periods: int, means: Any, stds: Any
) -> None:
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


def ranked_rolling_median_loop(
    values: Any, order: Any, window: int, min_periods: int, medians: Any
) -> None:
    """rolling_median_loop for any window in O(n log n): the window's finite points are counted in a
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
