"""Chart data read back from case.json, and the y-axis scale that keeps it readable.

`chart_series` holds bucketed series: per bucket the value plus its min and max, so a one-step
spike survives bucketing; values may be the strings "nan", "inf", "-inf" that JSON can hold.
"""

from __future__ import annotations

import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tscope.render.formatting import parse_number

# When the top of a panel's range is more than 30x its median, a linear axis would squeeze every
# ordinary value into the bottom 3 % of the panel: switch to log (or clip when values reach <= 0).
OUTLIER_RATIO = 30.0
LOG_PADDING = 1.15  # multiplicative headroom above and below the data on a log axis
LINEAR_PADDING = 0.06  # share of the range left free above and below the data
MAX_LOG_TICKS = 6
# Axis bounds are kept within ±1e300: a logged loss of 1.7e308 is finite, but its padding
# (x1.15) or the span to -1.7e308 is inf, and `10.0**309` for a tick raises OverflowError; that
# ended `tscope analyze` in a traceback. Values beyond are pinned to the panel's edge.
AXIS_LIMIT = 1e300


@dataclass(frozen=True)
class Series:
    metric: str
    steps: tuple[float, ...]
    values: tuple[float | None, ...]  # None: nothing logged in that bucket; NaN/Inf kept
    lows: tuple[float | None, ...]  # per-bucket minimum (the values when none was given)
    highs: tuple[float | None, ...]  # per-bucket maximum

    def finite_points(self) -> list[float]:
        every = (*self.values, *self.lows, *self.highs)
        return [value for value in every if value is not None and math.isfinite(value)]

    def within(self, first_step: float, last_step: float) -> Series | None:
        """The buckets from first_step to last_step (a zoomed view); None when none lies there."""
        keep = [i for i, step in enumerate(self.steps) if first_step <= step <= last_step]
        if not keep:
            return None
        return Series(
            metric=self.metric,
            steps=tuple(self.steps[i] for i in keep),
            values=tuple(self.values[i] for i in keep),
            lows=tuple(self.lows[i] for i in keep),
            highs=tuple(self.highs[i] for i in keep),
        )


@dataclass(frozen=True)
class Scale:
    kind: str  # "linear", "log", or "clipped": linear, points above `high` pinned to the top edge
    low: float
    high: float

    def __post_init__(self) -> None:
        floor = 1 / AXIS_LIMIT if self.kind == "log" else -AXIS_LIMIT
        low = min(max(self.low, floor), AXIS_LIMIT)
        high = min(max(self.high, floor), AXIS_LIMIT)
        if high <= low:  # both bounds pinned to the limit: keep a range to divide by
            low = high / 10 if self.kind == "log" else high - abs(high) * 0.1
        object.__setattr__(self, "low", low)
        object.__setattr__(self, "high", high)

    def fraction(self, value: float) -> float:
        """0 at the panel's bottom edge, 1 at its top; out-of-range values pinned to the edges."""
        if self.kind == "log":
            if value <= 0:
                return 0.0
            span = math.log10(self.high) - math.log10(self.low)
            position = (math.log10(value) - math.log10(self.low)) / span
        else:
            position = (value - self.low) / (self.high - self.low)
        return min(1.0, max(0.0, position))


def read_series(series_map: dict[str, Any], metric: str) -> Series | None:
    """One chart_series entry, tolerant of missing min/max lists; None when it has no points."""
    raw = series_map.get(metric)
    if not isinstance(raw, dict):
        return None
    steps = [parse_number(step) for step in as_list(raw.get("steps"))]
    values = [parse_number(value) for value in as_list(raw.get("values"))]
    if not steps or len(values) != len(steps):
        return None
    lows = [parse_number(value) for value in as_list(raw.get("min"))]
    highs = [parse_number(value) for value in as_list(raw.get("max"))]
    lows = lows if len(lows) == len(steps) else values
    highs = highs if len(highs) == len(steps) else values
    keep = [index for index, step in enumerate(steps) if is_finite(step)]
    if not keep:
        return None
    return Series(
        metric=metric,
        steps=tuple(float(steps[i] or 0.0) for i in keep),
        values=tuple(values[i] for i in keep),
        lows=tuple(lows[i] for i in keep),
        highs=tuple(highs[i] for i in keep),
    )


def choose_scale(finite: Sequence[float], log_above_span: float | None = None) -> Scale:
    """Linear unless a few values dwarf the rest; then log, or clipped if log cannot show them.

    `log_above_span`: also log when the positive values span more than this factor (a learning
    rate warming up ×20); values ≤ 0 then sit on the bottom edge, as a log axis cannot hold them.
    """
    if not finite:
        return Scale("linear", 0.0, 1.0)
    low, high = min(finite), max(finite)
    positive = [value for value in finite if value > 0]
    if log_above_span is not None and positive and max(positive) > log_above_span * min(positive):
        return Scale("log", min(positive) / LOG_PADDING, max(positive) * LOG_PADDING)
    median = statistics.median(finite)
    if median > 0 and high > OUTLIER_RATIO * median:
        if low > 0:
            return Scale("log", low / LOG_PADDING, high * LOG_PADDING)
        ordinary_top = max(value for value in finite if value <= OUTLIER_RATIO * median)
        return Scale("clipped", *_padded(low, ordinary_top))
    return Scale("linear", *_padded(low, high))


def ticks_for(scale: Scale) -> list[float]:
    if scale.kind != "log":
        return nice_ticks(scale.low, scale.high, target=4)
    exponents = range(math.floor(math.log10(scale.low)), math.ceil(math.log10(scale.high)) + 1)
    decades = [10.0**e for e in exponents if scale.low <= 10.0**e <= scale.high]
    if len(decades) >= 2:
        return decades[:: math.ceil(len(decades) / MAX_LOG_TICKS)]
    return [
        float(f"{mantissa * 10.0**e:.12g}")
        for e in exponents
        for mantissa in (1, 2, 5)
        if scale.low <= mantissa * 10.0**e <= scale.high
    ]


def axis_range(low: float, high: float) -> tuple[float, float]:
    """[low, high] as floats with a width above 0.0, widened by a step each side when empty.

    The width is checked in float, where it is used: two steps near 2**63 (or any two above
    2**53 a unit apart) are different integers but the same float, and `high - low` was 0.0 (a
    ZeroDivisionError that ended the analysis). Such a range is widened by its own magnitude.
    """
    low, high = float(low), float(high)
    if high - low > 0:
        return low, high
    pad = max(1.0, abs(low) * 1e-9)
    return low - pad, high + pad


def nice_ticks(low: float, high: float, target: int, integer: bool = False) -> list[float]:
    """About `target` round ticks (1, 2, 5 x 10^k apart) covering [low, high]."""
    low, high = (min(max(bound, -AXIS_LIMIT), AXIS_LIMIT) for bound in (low, high))
    if high <= low:
        return [low]
    raw_step = (high - low) / target
    if raw_step < sys.float_info.min:
        # A subnormal span (values 0 and 5e-324) has no power of ten below it to step by:
        # log10 of an underflowed step once ended the chart drawing in a traceback (red team,
        # session 29). Its two ends are the only ticks that can be told apart.
        return [low, high]
    magnitude = 10.0 ** math.floor(math.log10(raw_step))
    step = next(m * magnitude for m in (1, 2, 5, 10) if m * magnitude >= raw_step)
    if integer:
        step = max(1.0, float(round(step)))
    first = math.ceil(low / step - 1e-9) * step
    count = math.floor((high - first) / step + 1e-9) + 1
    return [float(f"{first + index * step:.12g}") for index in range(max(count, 0))]


def finite_runs(pairs: Sequence[tuple[float | None, float | None]]) -> list[list[int]]:
    """Index runs where both numbers are finite: lines break at gaps and at NaN/Inf."""
    runs: list[list[int]] = []
    current: list[int] = []
    for index, (first, second) in enumerate(pairs):
        if is_finite(first) and is_finite(second):
            current.append(index)
        elif current:
            runs.append(current)
            current = []
    if current:
        runs.append(current)
    return runs


def is_finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def as_mapping(value: Any) -> dict[str, Any]:
    """A payload object read defensively: a case written by another version may lack it."""
    return value if isinstance(value, dict) else {}


def as_records(value: Any) -> list[dict[str, Any]]:
    """The objects of a payload list (anything else in it is skipped)."""
    return [item for item in as_list(value) if isinstance(item, dict)]


def _padded(low: float, high: float) -> tuple[float, float]:
    if high == low:
        spread = abs(low) * 0.1 or 1.0
        return low - spread, high + spread
    margin = (high - low) * LINEAR_PADDING
    return low - margin, high + margin
