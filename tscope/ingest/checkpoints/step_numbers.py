"""Step counters read from checkpoint files: a stranger's file may put any value there."""

from __future__ import annotations

from typing import Any

from tscope.model.plain_digits import is_plain_digits

# Steps beyond 2^53 are not exact as floats (the layers table and charts hold them as such) and
# far beyond any run; a file claiming one is forged or damaged, so its step counts as unknown.
MAX_STEP = 1 << 53


def step_value(value: Any) -> int | None:
    """A step read from a file (int, float, numeric string, 0-d tensor) if it is a plausible
    one: a whole number in 0..MAX_STEP. NaN, 1e400, 2^63, "abc", True and [1] give None."""
    if value is None or isinstance(value, bool):
        return None
    try:
        if isinstance(value, str):
            value = value.strip()
            number: Any = int(value) if is_plain_digits(value.lstrip("+-")) else float(value)
        else:
            number = value.item() if hasattr(value, "item") and hasattr(value, "numel") else value
            if hasattr(number, "numel"):
                return None
        as_int = int(number)
        if isinstance(number, float) and number != as_int:
            return None
    except (TypeError, ValueError, OverflowError, RuntimeError):
        return None
    return as_int if 0 <= as_int <= MAX_STEP else None
