"""How often a run's own repeat-like points come by chance, outside a stretch being judged.

repeated_data.py flags points whose loss behaves as repeated batches do and asks whether a stretch
of them is longer than chance allows. The chance needs the run's rate of flagged points and their
persistence (a flagged point's chance of following a flagged one) outside that stretch, for each
of a run's many stretches: FlagCounts keeps running sums of one flag series so each stretch costs
O(blocks), not O(points).
"""

from __future__ import annotations

import numpy as np

# The chance of a stretch assumes fresh batches are independent; where the run's own repeat-like
# points come in runs (autocorrelated noise: sequential data, a smoothed log), a flagged point's
# chance of following a flagged one (its persistence, `FlagCounts.rates`) replaces the rate for every
# point after the first. Measured in blocks of PERSISTENCE_BLOCK_POINTS (the median of at least
# PERSISTENCE_MIN_BLOCKS), each shrunk toward the rate by PERSISTENCE_PSEUDO_COUNTS: on 4,400-point
# healthy synthetic logs with AR(1) noise the persistence was 0.15–0.20 against a rate of
# 0.10–0.13, enough to turn two 7-point chance stretches (chance 0.002–0.01) into 0.03–0.14.
PERSISTENCE_BLOCK_POINTS = 200
PERSISTENCE_MIN_BLOCKS = 3
PERSISTENCE_PSEUDO_COUNTS = 5


class FlagCounts:
    """Counts of one flag series, kept as running sums so that the rates outside each of a
    run's stretches cost O(blocks), not O(points): a 250,000-point log has ~1,000 stretches, and
    recounting every point per stretch was 8.6 of a 10.4 s analyze."""

    def __init__(self, flag: np.ndarray, valid: np.ndarray) -> None:
        self.points = flag.size
        self.flagged_valid = _running_sum(flag & valid)
        self.valid = _running_sum(valid)
        # Pairs (i, i+1) with both points valid: i flagged (followed), and i+1 flagged too (hit).
        follows_flagged = flag[:-1] & valid[:-1] & valid[1:]
        self.followed = _running_sum(follows_flagged)
        self.hits = _running_sum(flag[1:] & follows_flagged)
        self.blocks = self.points // PERSISTENCE_BLOCK_POINTS
        if self.blocks >= PERSISTENCE_MIN_BLOCKS:
            # np.array_split's blocks of the pairs: the first (pairs % blocks) one longer.
            pairs = follows_flagged.size
            size, longer = divmod(pairs, self.blocks)
            lengths = np.full(self.blocks, size, dtype=np.int64)
            lengths[:longer] += 1
            self.block_ends = np.cumsum(lengths)
            self.block_starts = self.block_ends - lengths

    def rates(self, start: int, end: int) -> tuple[float, float]:
        """(rate, persistence) of repeat-like points outside the stretch start..end-1: how often
        a valid point is flagged, and how often one that follows a flagged point is. The
        persistence is the median over blocks of PERSISTENCE_BLOCK_POINTS points (each block's
        count shrunk toward the rate by PERSISTENCE_PSEUDO_COUNTS), so that the rest of a
        repetition broken into several stretches, which sits in one or two blocks, cannot raise
        it; with fewer than PERSISTENCE_MIN_BLOCKS blocks it is the rate (independence, as for
        fresh batches). Never below the rate: `chance_stretches` then assumes no less than
        independence does."""
        flagged = int(
            self.flagged_valid[-1] - (self.flagged_valid[end] - self.flagged_valid[start])
        )
        usable = int(self.valid[-1] - (self.valid[end] - self.valid[start]))
        rate = flagged / max(usable, 1)
        if self.blocks < PERSISTENCE_MIN_BLOCKS:
            return rate, rate
        # The pairs touching the stretch (i or i+1 inside it) are not counted.
        excluded_from = max(start - 1, 0) if end > start else start
        excluded_to = max(min(end, self.points - 1), excluded_from)
        followed = self._per_block(self.followed, excluded_from, excluded_to)
        hits = self._per_block(self.hits, excluded_from, excluded_to)
        per_block = (hits + PERSISTENCE_PSEUDO_COUNTS * rate) / (
            followed + PERSISTENCE_PSEUDO_COUNTS
        )
        return rate, max(float(np.median(per_block)), rate)

    def _per_block(self, running: np.ndarray, excluded_from: int, excluded_to: int) -> np.ndarray:
        """Each block's count, less the pairs excluded_from..excluded_to-1 that fall in it."""
        lows, highs = self.block_starts, self.block_ends
        cut_low = np.clip(excluded_from, lows, highs)
        cut_high = np.clip(excluded_to, lows, highs)
        counts: np.ndarray = (running[highs] - running[lows]) - (
            running[cut_high] - running[cut_low]
        )
        return counts


def _running_sum(mask: np.ndarray) -> np.ndarray:
    """counts[i] = how many of mask[:i] are set (counts[0] = 0)."""
    counts = np.zeros(mask.size + 1, dtype=np.int64)
    np.cumsum(mask, out=counts[1:])
    return counts


def smooth_chance(
    drop: np.ndarray, change: np.ndarray, start: int, end: int, periods: int
) -> float:
    """chance_stretches with the repeat-like test at the stretch's own roughness: the run's rate
    (outside the stretch) of points whose p-step drop is negative and whose |d2| is at most the
    stretch's largest, to the stretch's length."""
    roughest = float(np.max(np.abs(change[start:end])))
    with np.errstate(invalid="ignore"):
        as_smooth = (drop < 0) & (np.abs(change) <= roughest)
    rates = FlagCounts(as_smooth, np.isfinite(change)).rates(start, end)
    return chance_stretches(change.size, *rates, end - start, periods)


def chance_stretches(
    points_in_run: int, rate: float, persistence: float, length: int, periods: int
) -> float:
    """About how many runs of `length` repeat-like points in a row a run of fresh data shows by
    chance: a start at each point and each of the `periods` looked for, the first point repeat-like at the run's own rate
    and each next one at its persistence (the run's rate of a flagged point following a flagged
    one). Fresh batches are independent, so the two are equal; a loss whose noise is
    autocorrelated (sequential data, a smoothed log) flags points in runs, and so does chance
    there: counted at the rate alone, 2 of 300 healthy synthetic logs with AR(1) batch noise
    (bench/synthetic_logs.py, φ 0.5–0.9) got a repeated_data warning. The smoothness and level
    tests come on top, as margin: a real log's chance stretch passed them."""
    return periods * points_in_run * rate * persistence ** (length - 1)


def period_differences(values: np.ndarray, period: int) -> tuple[np.ndarray, np.ndarray]:
    """(drop, change): v[t] − v[t−p], and its own p-step change d2[t] = drop[t] − drop[t−p]
    (NaN where a term is missing)."""
    drop = np.full(values.size, np.nan)
    drop[period:] = values[period:] - values[:-period]
    change = np.full(values.size, np.nan)
    change[2 * period :] = drop[2 * period :] - drop[period:-period]
    return drop, change
