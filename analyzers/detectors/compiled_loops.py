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

from tscope.analyzers.detectors.numba_target import without_unused_optional_modules
from tscope.analyzers.detectors.rolling_kernels import (
    ranked_rolling_median_loop,
    rolling_mean_std_loop,
    rolling_median_loop,
)
from tscope.numba_loader import load_numba

# Below this many points the numpy loops take a few milliseconds: not worth importing numba
# (0.3–0.5 s on a quiet core) and loading the cached kernels in a short run's process.
COMPILED_MIN_POINTS = 200

Kernel = Callable[..., float]
# A float64's bits as an int64, XORed with _MAGNITUDE_BITS when negative, order as the floats do
# (-0.0 just below 0.0); NaN is never compared this way.
_MAGNITUDE_BITS = 0x7FFF_FFFF_FFFF_FFFF
_LARGEST_KEY = 0x7FFF_FFFF_FFFF_FFFF


def _search(
    data: Any, linear: bool, n: int, min_size: int, penalty: float, best: Any, previous: Any
) -> float:
    """generic_segments.pelt's loop; `data` holds the prefix sums its cost closure uses:
    rows s1, s2 (constant) or t, t², y, t·y, y² (linear)."""
    admissible = np.empty(n + 1, dtype=np.int64)
    totals = np.empty(n + 1, dtype=np.float64)
    bits = totals.view(np.int64)  # the same memory, for the minimum's search below
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
        # Every candidate scored first, then the choice, over each stretch of consecutive
        # starts (unpruned, most of a series without changes: 0 then min_size, min_size + 1, …)
        # in a loop of one model's arithmetic with no branch across iterations, which LLVM turns
        # into SIMD: the linear search over 2,000 points takes ~1 ms instead of ~10 ms. The same
        # IEEE operations per candidate as the numpy cost closures.
        stretch = 0
        while stretch < usable:
            # The starts ascend without repeats: when the span matches the count, the rest is
            # one stretch (checked at once, not start by start).
            if admissible[usable - 1] - admissible[stretch] == usable - 1 - stretch:
                stop = usable
            else:
                stop = stretch + 1
                while stop < usable and admissible[stop] == admissible[stop - 1] + 1:
                    stop += 1
            # Views from the stretch's first start: an index that cannot be negative, so numba
            # adds no wraparound test per load and LLVM can vectorize the loop.
            first, size = admissible[stretch], stop - stretch
            scored = totals[stretch:stop]
            earlier = best[first : first + size]
            if linear:
                t, tt = data[0, first : first + size], data[1, first : first + size]
                y, ty = data[2, first : first + size], data[3, first : first + size]
                yy = data[4, first : first + size]
                for k in range(size):
                    length = end - (first + k)
                    st = data[0, end] - t[k]
                    stt = data[1, end] - tt[k]
                    sy = data[2, end] - y[k]
                    sty = data[3, end] - ty[k]
                    syy = data[4, end] - yy[k]
                    var_t = stt - st * st / length
                    cov = sty - st * sy / length
                    residual = syy - sy * sy / length
                    explained = cov * cov / var_t if var_t > 0 else 0.0
                    cost = residual - explained
                    # np.maximum(cost, 0.0): a NaN or a -0.0 stays as it is
                    scored[k] = earlier[k] + (0.0 if cost < 0.0 else cost) + penalty
            else:
                s1, s2 = data[0, first : first + size], data[1, first : first + size]
                for k in range(size):
                    length = end - (first + k)
                    total = data[0, end] - s1[k]
                    cost = (data[1, end] - s2[k]) - total * total / length
                    scored[k] = earlier[k] + (0.0 if cost < 0.0 else cost) + penalty
            stretch = stop
        # np.argmin: the first NaN if there is one, else the first of equal minima. The minimum
        # is found on the totals' bits read as order-preserving integers (a reduction LLVM
        # vectorizes; a float one it may not reorder), then its first index. Only zeros have
        # two encodings that compare equal: for a zero minimum the first zero is chosen.
        missing = 0
        lowest = _LARGEST_KEY
        for i in range(usable):
            missing += totals[i] != totals[i]
            key = bits[i] ^ ((bits[i] >> 63) & _MAGNITUDE_BITS)
            lowest = min(lowest, key)
        chosen = 0
        if missing:
            while totals[chosen] == totals[chosen]:
                chosen += 1
        else:
            while bits[chosen] ^ ((bits[chosen] >> 63) & _MAGNITUDE_BITS) != lowest:
                chosen += 1
            if totals[chosen] == 0.0:
                chosen = 0
                while totals[chosen] != 0.0:
                    chosen += 1
        best[end] = totals[chosen]
        previous[end] = admissible[chosen]
        threshold = best[end] + penalty
        # Counted first (a vectorized loop): where every start stays, nothing moves.
        staying = 0
        for i in range(usable):
            staying += totals[i] <= threshold
        kept = count
        if staying < usable:
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


_PYTHON_LOOPS: dict[str, Callable[..., Any]] = {
    "rolling_median": rolling_median_loop,
    "pelt": _search,
    "cusum": _cusum_scan,
    "window_medians": _window_medians,
    "rolling_mean_std": rolling_mean_std_loop,
    "ranked_rolling_median": ranked_rolling_median_loop,
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
    numba = load_numba()
    if numba is None:  # the optional `fast` extra is not installed
        return None
    compiled: Kernel = without_unused_optional_modules(
        numba.njit(cache=True, nogil=True)(_PYTHON_LOOPS[name])
    )
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
