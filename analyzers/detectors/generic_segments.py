"""Change points of a generic series: exact PELT with a BIC penalty, mean-shift or linear model.

Loss curves go through PeltDetector (bucket medians, a 3σ minimum shift: tuned so that a decaying
loss is not cut into pieces). A series that is not a loss curve — a throughput, a gradient-norm
level, a learning rate, a metric of unknown shape — can be piecewise constant or piecewise linear,
so both models are fitted and the one with the lower BIC total is kept:

    constant:  cost = Σ (x − segment mean)²,           penalty 2σ² log n per change (level, step)
    linear:    cost = Σ (x − segment least-squares line)², penalty 3σ² log n (intercept, slope, step)

σ is the noise level from first differences (robust to both steps and slopes). PELT (Killick et
al. 2012) finds the exact optimum of each penalized cost, where binary segmentation (the usual
baseline, ruptures' Binseg) is greedy. bench/bench_change_points.py measures both side by side.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tscope.analyzers.detectors.pelt import _difference_sigma

# Segments shorter than this carry no level or slope worth reporting (and a line needs 3 points).
GENERIC_MIN_SEGMENT = 5
CONSTANT_PARAMETERS = 2.0  # a new level and the change's position
LINEAR_PARAMETERS = 3.0  # intercept, slope and position

Cost = Callable[[np.ndarray, int], np.ndarray]


def generic_change_points(values: np.ndarray) -> tuple[list[int], str]:
    """(indices where a new segment starts, "constant" or "linear") for a finite 1-D series."""
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size < 2 * GENERIC_MIN_SEGMENT or not np.isfinite(x).all():
        return [], "constant"
    sigma = _difference_sigma(x)
    if not np.isfinite(sigma) or sigma == 0.0:
        return [], "constant"
    log_n = float(np.log(x.size))
    fits = []
    for model, cost, parameters in (
        ("constant", _constant_cost(x), CONSTANT_PARAMETERS),
        ("linear", _linear_cost(x), LINEAR_PARAMETERS),
    ):
        penalty = parameters * sigma**2 * log_n
        breaks, total = pelt(cost, x.size, GENERIC_MIN_SEGMENT, penalty)
        fits.append((total, model, breaks))
    total, model, breaks = min(fits, key=lambda fit: fit[0])
    return breaks, model


def pelt(cost: Cost, n: int, min_size: int, penalty: float) -> tuple[list[int], float]:
    """Exact PELT over a vectorized segment cost: (segment starts after the first, total)."""
    best = np.full(n + 1, np.inf)
    best[0] = -penalty  # the first segment pays no change penalty
    previous = np.zeros(n + 1, dtype=np.int64)
    admissible = np.array([0], dtype=np.int64)
    for end in range(min_size, n + 1):
        starts = admissible[end - admissible >= min_size]
        if starts.size == 0:
            continue
        totals = best[starts] + cost(starts, end) + penalty
        chosen = int(np.argmin(totals))
        best[end], previous[end] = totals[chosen], starts[chosen]
        # Pruning (Killick et al.): a start whose cost already exceeds the optimum by the penalty
        # can never be optimal later; starts still too close to `end` are kept.
        keep = totals <= best[end] + penalty
        admissible = np.concatenate([starts[keep], admissible[end - admissible < min_size], [end]])
    breaks = []
    end = n
    while end > 0:
        end = int(previous[end])
        if end > 0:
            breaks.append(end)
    return sorted(breaks), float(best[n])


def _constant_cost(x: np.ndarray) -> Cost:
    centred = x - x.mean()
    s1 = np.concatenate(([0.0], np.cumsum(centred)))
    s2 = np.concatenate(([0.0], np.cumsum(centred * centred)))

    def cost(starts: np.ndarray, end: int) -> np.ndarray:
        length = end - starts
        total = s1[end] - s1[starts]
        result: np.ndarray = np.maximum((s2[end] - s2[starts]) - total * total / length, 0.0)
        return result

    return cost


def _linear_cost(x: np.ndarray) -> Cost:
    t = np.arange(x.size, dtype=np.float64) - (x.size - 1) / 2.0
    y = x - x.mean()
    prefix = {
        name: np.concatenate(([0.0], np.cumsum(series)))
        for name, series in (("t", t), ("tt", t * t), ("y", y), ("ty", t * y), ("yy", y * y))
    }

    def cost(starts: np.ndarray, end: int) -> np.ndarray:
        length = end - starts
        st, stt = (prefix[k][end] - prefix[k][starts] for k in ("t", "tt"))
        sy, sty, syy = (prefix[k][end] - prefix[k][starts] for k in ("y", "ty", "yy"))
        var_t = stt - st * st / length
        cov = sty - st * sy / length
        residual = syy - sy * sy / length
        with np.errstate(divide="ignore", invalid="ignore"):
            explained = np.where(var_t > 0, cov * cov / var_t, 0.0)
        result: np.ndarray = np.maximum(residual - explained, 0.0)
        return result

    return cost
