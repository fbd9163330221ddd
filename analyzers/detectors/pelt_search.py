"""Exact PELT search with the L2 (mean-shift) cost, in numpy.

`pelt_l2_breakpoints(x, m, pen)` returns the same segmentation as
`ruptures.Pelt(model="l2", min_size=m, jump=1).fit(x).predict(pen=pen)`, breakpoint for breakpoint
(tests/test_pelt_search.py checks it against ruptures), 35–80× faster on the ≤300 bucket medians
the detector segments. ruptures re-computes each candidate segment's variance with `np.var` and sums
Python dicts; here each PELT step scores the whole admissible set at once from prefix sums of x
and x².

Prefix-sum costs round differently from `np.var`, so a decision (which candidate is best, which
ones to prune) is taken from them only when it holds with a margin larger than a rigorous bound
on their error. Anything closer (exact ties, constant stretches) is decided on costs computed the
way ruptures computes them, and the optimal cost of every prefix is kept in that exact form, so
ties break exactly as in ruptures.
"""

from __future__ import annotations

from typing import Any

import numpy as np

# Margin on the worst-case rounding bound of _tolerance (which already overestimates real errors
# by orders of magnitude). Larger only sends more near-ties to the exact path: slower, never
# different.
TOLERANCE_SAFETY = 2.0


def pelt_l2_breakpoints(values: np.ndarray, min_size: int, penalty: float) -> list[int]:
    """Sorted segment ends of the optimal penalized L2 segmentation; the last one is len(values).

    Same contract as ruptures' Pelt with jump=1: segments have at least `min_size` points (the
    first may be shorter, as in ruptures) and every segment costs its squared deviation from its
    mean plus `penalty`. `values` must be 1-D and finite.
    """
    x = np.asarray(values, dtype=np.float64)
    n = x.size
    size = max(int(min_size), 1)  # ruptures' CostL2 raises its own minimum to 1
    if x.ndim != 1 or not np.isfinite(x).all():
        raise ValueError("PELT needs a 1-D series of finite values")
    if size > n:
        raise ValueError(f"min_size {min_size} is longer than the series ({n} points)")
    if not (np.isfinite(penalty) and penalty >= 0):
        raise ValueError(f"the penalty must be finite and non-negative, not {penalty}")
    # Near the float limit the prefix sums overflow; the search then decides everything on
    # ruptures' own arithmetic (see _tolerance), so those warnings carry no information.
    with np.errstate(over="ignore", invalid="ignore"):
        return _Search(x, size, penalty).run()


class _Search:
    """One PELT pass; index t stands for the prefix x[:t] and for a segment starting at t."""

    def __init__(self, x: np.ndarray, min_size: int, penalty: float) -> None:
        self.n = x.size
        self.min_size = min_size
        self.penalty = penalty
        # ruptures' CostL2 works on the (n, 1) view; np.var over it is what the exact path repeats.
        self.column = x.reshape(-1, 1)
        # Centring keeps x² from swamping the variance when the level is far from zero.
        centred = x - x.mean()
        self.sum_x = np.concatenate(([0.0], np.cumsum(centred)))
        self.sum_x2 = np.concatenate(([0.0], np.cumsum(centred * centred)))
        self.segment_error = _tolerance(x, centred, penalty)
        # Without a finite error bound (values near the float limit) every decision is exact.
        self.approximate = np.isfinite(self.segment_error)
        # Optimal cost of each prefix from prefix sums, with a bound on its distance to the value
        # ruptures would hold (errors add up along the chain of segments)...
        self.best = np.zeros(self.n + 1)
        self.best_error = np.zeros(self.n + 1)
        self.previous_end = np.zeros(self.n + 1, dtype=np.int64)
        # ...and, built only when a near-tie needs it, the segment values ruptures sums for it:
        # cost + penalty per segment in order, after the int 0 of its (0, 0) sentinel segment.
        self.exact_parts: dict[int, list[Any]] = {0: [0]}

    def run(self) -> list[int]:
        n, size = self.n, self.min_size
        admissible = np.zeros(n + 1, dtype=bool)
        # ruptures solves the prefixes ending at min_size..n-1 and n.
        for end in [*range(size, n), n]:
            start = end - size
            # ruptures also appends a start 1..min_size-1 that has no solved prefix; it skips it
            # when scoring and its zip with the shorter score list drops it again (it is always
            # the newest, last entry), so such a start never takes part.
            if start == 0 or start >= size:
                admissible[start] = True
            starts = admissible.nonzero()[0]
            pruned = self._step(starts, end)
            admissible[starts[pruned]] = False
        ends = [n]
        while ends[-1] > 0:
            ends.append(int(self.previous_end[ends[-1]]))
        return sorted(ends[:-1])

    def _step(self, starts: np.ndarray, end: int) -> np.ndarray:
        """Solve the prefix x[:end] from the admissible starts; return a mask of starts to prune."""
        sums = self.sum_x[end] - self.sum_x[starts]
        costs = (self.sum_x2[end] - self.sum_x2[starts]) - sums * sums / (end - starts)
        totals = self.best[starts] + (costs + self.penalty)
        errors = self.best_error[starts] + self.segment_error
        exact: dict[int, Any] = {}

        def exact_total(i: int) -> Any:
            if i not in exact:
                exact[i] = self._exact_total(int(starts[i]), end)
            return exact[i]

        if self.approximate:
            # Only these can be the optimum: every other total is surely above some total.
            near = (totals - errors <= np.min(totals + errors)).nonzero()[0].tolist()
        else:
            near = list(range(starts.size))
        if len(near) == 1:
            chosen = near[0]
            best, best_error = totals[chosen], errors[chosen]
        else:
            # Python's min keeps the first of equal keys: ruptures' tie-break (earliest start).
            chosen = min(near, key=exact_total)
            best, best_error = exact_total(chosen), 0.0
        self.best[end], self.best_error[end] = best, best_error
        self.previous_end[end] = starts[chosen]
        # ruptures keeps a start whose total is within one penalty of the optimum.
        threshold = best + self.penalty
        keep = totals <= threshold
        if self.approximate:
            undecided = (np.abs(totals - threshold) <= errors + best_error).nonzero()[0].tolist()
        else:
            undecided = list(range(starts.size))
        if undecided:
            exact_threshold = sum(self._exact_parts(end)) + self.penalty
            for i in undecided:
                keep[i] = exact_total(i) <= exact_threshold
        pruned: np.ndarray = ~keep
        return pruned

    def _exact_total(self, start: int, end: int) -> Any:
        """The total ruptures compares for the candidate segment x[start:end]."""
        return sum([*self._exact_parts(start), self._exact_cost(start, end)])

    def _exact_parts(self, end: int) -> list[Any]:
        """ruptures' partition values for the solved prefix x[:end], built along its chain."""
        chain = [end]
        while chain[-1] not in self.exact_parts:
            chain.append(int(self.previous_end[chain[-1]]))
        for later, earlier in zip(reversed(chain[:-1]), reversed(chain[1:]), strict=True):
            parts = [*self.exact_parts[earlier], self._exact_cost(earlier, later)]
            self.exact_parts[later] = parts
        return self.exact_parts[end]

    def _exact_cost(self, start: int, end: int) -> Any:
        """Segment cost plus penalty, computed with the very operations ruptures uses."""
        return self.column[start:end].var(axis=0).sum() * (end - start) + self.penalty


def _tolerance(x: np.ndarray, centred: np.ndarray, penalty: float) -> float:
    """Bound on |prefix-sum total − ruptures' total| for any candidate; inf if it overflows.

    Worst-case rounding analysis (u = ε/2, n points, S = Σy², A = Σ|y|, Y = max|y| for the
    centred y, X = max|x|). Any-order sums of n terms err by ≤ n·u·Σ|terms|, so the segment sums
    of y² and y err by ≤ (2n+3)·u·S and ≤ (2n+1)·u·A; squaring the latter and dividing by the
    length (the segment mean is at most Y) adds ≤ (4n+2)·u·A·Y. np.var's two-pass sum errs by
    ≤ (n+6)·u·S plus n³·u²·X² from its rounded mean; centring, the squaring, the final
    subtraction and the additions that form a total add ≤ 18·u·(S + penalty) (every prefix
    optimum and segment cost is at most S + penalty): (3n+27)·u·(S + penalty) in all, to which
    the terms of order u² (products of first-order errors) are added.
    """
    n = x.size
    unit = float(np.finfo(np.float64).eps) / 2
    # numpy scalars, so that an overflow gives inf rather than raising OverflowError.
    squares = np.sum(centred * centred)
    spread = np.sum(np.abs(centred))
    widest = np.max(np.abs(centred))
    largest = np.max(np.abs(x))
    first_order = (3.1 * n + 30) * (squares + penalty) + (4.1 * n + 2.1) * spread * widest
    second_order = 1.1 * (2 * n + 1) ** 2 * spread**2 + 1.1 * (n + 1) ** 3 * largest**2
    bound = TOLERANCE_SAFETY * (unit * first_order + unit * unit * second_order)
    return float(bound) if np.isfinite(bound) else float("inf")
