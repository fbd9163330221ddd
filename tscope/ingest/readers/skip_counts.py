"""Skip events from a log's count of skipped iterations: per logging window, or a running total.

Megatron prints the count of its logging window; a log that prints a running total instead (never
falling, and repeating a count while the loss scale holds: no new overflow) gets its events where
the total rose, by how much. Read per window, such a log had a skip at every record after its
first overflow: a blind set's collapse from 230 (session 27) was dated at a lone overflow at 194.
"""

from __future__ import annotations

import math
from itertools import pairwise

from tscope.model import RunEvent


def possible_skip_count(value: float, iteration: int) -> bool:
    """A count of skipped iterations is a whole number from 0 to the iteration it is logged at
    (a window's count and a running total alike); `inf` or 1e308 in a crafted log is neither
    (red team, session 28: int(inf) ended the run in a traceback)."""
    return math.isfinite(value) and 0 <= value <= max(iteration, 1) and value == int(value)


def skip_events(
    counts: list[tuple[int, float]], scales: dict[int, float], source: str
) -> list[RunEvent]:
    """A skip event per record that skipped iterations; `counts` is (iteration, count) per record
    in log order, `scales` the loss scale logged per iteration."""
    running = len(counts) > 1 and all(b[1] >= a[1] for a, b in pairwise(counts))
    if running:
        running = any(
            later > 0 and later == earlier and not _scale_fell(scales, step_a, step_b)
            for (step_a, earlier), (step_b, later) in pairwise(counts)
        )
    if not running:
        return [skipped_event(step, value, source) for step, value in counts if value > 0]
    events, previous = [], 0.0
    for step, value in counts:
        if value > previous:
            events.append(skipped_event(step, value - previous, source))
        previous = max(previous, value)
    return events


def _scale_fell(scales: dict[int, float], earlier: int, later: int) -> bool:
    before, after = scales.get(earlier), scales.get(later)
    # Unknown (no scale logged): a repeated count is then read as Megatron's, per window.
    return before is None or after is None or after < before


def skipped_event(step: int, skipped: float, source: str) -> RunEvent:
    return RunEvent(
        "skipped_step",
        step,
        f"{int(skipped)} iteration(s) skipped in the logging window that ends at iteration {step} "
        "(the optimizer step was dropped: fp16 overflow or a non-finite gradient)",
        source,
        {"skipped_iterations": skipped},
    )
