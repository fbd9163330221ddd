"""repeated_data: the loss turns into the loss of the same few batches, fed again and again.

With fresh data, the loss of step t and of step t − p differ by the batches' own noise: the gap
varies from one t to the next as much as the run's step-to-step noise. When the loader feeds
the same p batches in turn (a resumed iterator replaying its buffer, a sampler stuck on one
shard, a cache keyed wrongly), the loss of step t is the loss of the batch seen at t − p after
p more updates on it: the gap becomes what those updates taught the model — nearly the same
small drop every time (the model memorizing the batch). Read from the logged loss alone, over a
window of WINDOW_POINTS consecutive gaps x_t − x_(t−p):

- memorization: at least MIN_DROPS of them are drops;
- consistency: their spread (median absolute deviation from their median) is below
  CONSISTENCY_FRACTION of the run's step-to-step noise (median |x_t − x_(t−1)|), and their size
  (median |gap|) below that noise.

- the return of fresh data: the RETURN_POINTS points after the stretch sit, by their median, at
  least one step-to-step noise above its last point (the memorized batches had a lower loss
  than new ones). Without it the early fast descent of a fresh model, whose batches all score
  alike, looks the same (two dev runs fired on their first 20–30 steps).

Under fresh data ≥ 7 of 8 drops has probability ≈ 0.035 (a fair coin; ~0.1 on a falling trend)
and a spread of 8 gaps below 1/4 of the usual one well under 1e-3, so a window qualifies by
chance about once in 10^4–10^5. A stretch (qualifying windows merged) must also be at most
MAX_STRETCH_FRACTION of the run: a loss that is smooth everywhere (an EMA-smoothed log) has no
fresh-data noise to collapse from. Periods 1…MAX_PERIOD (the number of distinct batches) are
tried; the longest stretch is reported, the smaller period on a tie. On the benchmark's dev
split (bench/accuracy) the planted repetitions' gaps had a spread of 0.03–0.1 of the noise and
a size of 0.27–0.35 of it; no healthy control or healthy real log fired (docs/accuracy.md).
"""

from __future__ import annotations

import numpy as np
from tscope.analyzers.base import Evidence
from tscope.analyzers.signals import fmt, loss_series, primary_loss

from tscope.model import Finding

MAX_PERIOD = 4
WINDOW_POINTS = 8
MIN_DROPS = 7
CONSISTENCY_FRACTION = 0.25
MAX_STRETCH_FRACTION = 0.5
RETURN_POINTS = 3
SAME_STRETCH_FRACTION = 0.8
# Fewer logged loss points than this and the run's own noise is not known well enough.
MIN_POINTS = 30


class RepeatedDataExplainer:
    name = "repeated_data"
    categories: tuple[str, ...] = ("repeated_data",)  # registered in tscope/model/categories.py

    def run(self, evidence: Evidence) -> list[Finding]:
        run = evidence.run
        loss = primary_loss(run)
        if loss is None:
            return []
        steps, values = loss_series(run, loss)
        finite = np.isfinite(values)
        steps, values = steps[finite], values[finite]
        if values.size < MIN_POINTS:
            return []
        noise = float(np.median(np.abs(np.diff(values))))
        if noise <= 0:
            return []  # a constant loss: nothing varies, the plateau rule speaks
        stretches = [
            (stretch[1] - stretch[0], stretch[0], period)
            for period in range(1, MAX_PERIOD + 1)
            if (stretch := _longest_stretch(values, period, noise)) is not None
        ]
        if not stretches:
            return []
        # A multiple of the period repeats too: the smallest period whose stretch is nearly as
        # long as the longest is the number of distinct batches.
        longest = max(points for points, _, _ in stretches)
        best = next(s for s in stretches if s[0] >= SAME_STRETCH_FRACTION * longest)
        points, first, period = best
        last = first + points - 1
        gaps = values[first : last + 1] - values[first - period : last + 1 - period]
        first_step, last_step = int(steps[first - period]), int(steps[last])
        return [
            Finding(
                category="repeated_data",
                severity="warning",
                confidence=0.6,
                step=first_step,
                layer=None,
                message=(
                    f"From step {first_step} to {last_step} the loss behaves like the loss of "
                    f"the same {_batches(period)} fed again and again: each point differs from "
                    f"the one {period} step{'s' if period > 1 else ''} before by a median "
                    f"{fmt(float(np.median(np.abs(gaps))))}, nearly the same every time (the "
                    f"run's step-to-step noise is {fmt(noise)}), and {int((gaps < 0).sum())} of "
                    f"{gaps.size} of those differences are drops — the model memorizing the "
                    "repeated data."
                ),
                evidence={
                    "period": period,
                    "first_step": first_step,
                    "last_step": last_step,
                    "points": int(points + period),
                    "median_gap": float(np.median(np.abs(gaps))),
                    "run_noise": noise,
                    "drops": int((gaps < 0).sum()),
                },
                suggestion=(
                    "Check the data loader around this step: a resumed iterator replaying its "
                    "buffer, a sampler or shard index that stopped advancing, a cache returning "
                    "the same items; compare the sample ids of these steps."
                ),
                threshold=(
                    f"over {WINDOW_POINTS} gaps x_t − x_(t−p), p ≤ {MAX_PERIOD}: ≥ {MIN_DROPS} "
                    f"drops, spread < {CONSISTENCY_FRACTION:g} × the run's median "
                    f"|x_t − x_(t−1)|, size < it; the stretch ≤ {MAX_STRETCH_FRACTION:.0%} of "
                    "the run"
                ),
            )
        ]


def _longest_stretch(values: np.ndarray, period: int, noise: float) -> tuple[int, int] | None:
    """[first, end) indices of the longest run of qualifying windows' points, or None."""
    gaps = values[period:] - values[:-period]  # gaps[i] belongs to point i + period
    if gaps.size < WINDOW_POINTS:
        return None
    windows = np.lib.stride_tricks.sliding_window_view(gaps, WINDOW_POINTS)
    centre = np.median(windows, axis=1)
    spread = np.median(np.abs(windows - centre[:, None]), axis=1)
    consistent = (spread < CONSISTENCY_FRACTION * noise) & (
        np.median(np.abs(windows), axis=1) < noise
    )
    memorizing = (windows < 0).sum(axis=1) >= MIN_DROPS
    qualifying = np.flatnonzero(consistent & memorizing)
    if qualifying.size == 0:
        return None
    covered = np.zeros(gaps.size, dtype=bool)
    for first in qualifying:
        covered[first : first + WINDOW_POINTS] = True
    best: tuple[int, int] | None = None
    index = 0
    while index < covered.size:
        if not covered[index]:
            index += 1
            continue
        end = index
        while end < covered.size and covered[end]:
            end += 1
        start = index
        index = end
        # A window may qualify with a fresh point or two in it (MIN_DROPS of WINDOW_POINTS, a
        # median spread): trim the ends' gaps that are rises or lie outside the consistency band
        # around the stretch's median gap, so it spans the repeated batches only.
        centre_gap = float(np.median(gaps[start:end]))
        band = CONSISTENCY_FRACTION * noise
        while end > start and _outside(float(gaps[end - 1]), centre_gap, band):
            end -= 1
        while start < end and _outside(float(gaps[start]), centre_gap, band):
            start += 1
        too_long = end - start > MAX_STRETCH_FRACTION * values.size
        if (
            end - start >= WINDOW_POINTS - 1
            and not too_long
            and _fresh_data_returns(values, end + period, noise)
            and (best is None or end - start > best[1] - best[0])
        ):
            best = (start, end)
    if best is None:
        return None
    return best[0] + period, best[1] + period


def _outside(gap: float, centre: float, band: float) -> bool:
    """Not a repeated batch's gap: a rise, or off the stretch's median gap by more than `band`."""
    return gap >= 0 or abs(gap - centre) > band


def _fresh_data_returns(values: np.ndarray, end: int, noise: float) -> bool:
    """The loss climbs back after the stretch [.., end): fresh batches score above memorized ones."""
    after = values[end : end + RETURN_POINTS]
    if after.size < RETURN_POINTS:
        return False
    return bool(np.median(after) - values[end - 1] >= noise)


def _batches(period: int) -> str:
    return "batch" if period == 1 else f"{period} batches"
