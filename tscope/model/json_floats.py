"""Floats rounded to six significant digits, as case.json holds them, for a whole list at once.

`float(f"{x:.6g}")` per item was ~3 ms of a 10,000-step run's case (~11,000 chart floats; issue
15). Here the same numbers come from numpy: x scaled by an exact power of ten to six integer
digits, rounded half to even (np.rint), and scaled back with one correctly rounded operation.
The scaling itself rounds once, so an item whose scaled value lies within 1e-6 of a rounding tie,
whose decimal exponent log10 may misjudge, or whose power of ten is not exact in float64 (beyond
1e±22) is rounded by the string way instead (tests/test_json_floats.py compares both).
"""

from __future__ import annotations

import numpy as np

SIGNIFICANT_DIGITS = 6
# 10**k is exact in float64 up to k = 22: a larger scale would round before the number does.
_EXACT_POWER_MAX = 22
# |scaled - its integer part - 0.5| below this is treated as a possible tie (the scaling's own
# error is below 2**-53 × 1e6 ≈ 1.1e-10).
_TIE_MARGIN = 1e-6


def rounded_floats(values: list[float]) -> list[float | str] | None:
    """[float(f"{x:.6g}") for x in values] for a list of finite floats, or None when an item is
    not finite (the caller's per-item path writes those as strings)."""
    array = np.array(values, dtype=np.float64)
    if not np.isfinite(array).all():
        return None
    magnitude = np.abs(array)
    nonzero = magnitude > 0
    exponent = np.floor(np.log10(np.where(nonzero, magnitude, 1.0)))
    decimals = (SIGNIFICANT_DIGITS - 1) - exponent  # digits kept after the decimal point
    exact = np.abs(decimals) <= _EXACT_POWER_MAX
    power = 10.0 ** np.where(exact, np.abs(decimals), 0.0)
    up = decimals >= 0
    scaled = np.where(up, array * power, array / power)
    mantissa = np.rint(scaled)  # (n,) six-digit integers, half to even
    rounded = np.where(up, mantissa / power, mantissa * power)
    digits = np.abs(mantissa)
    sure = (
        exact
        & (np.abs(np.abs(scaled - np.trunc(scaled)) - 0.5) > _TIE_MARGIN)
        & (digits >= 10.0 ** (SIGNIFICANT_DIGITS - 1))
        & (digits <= 10.0**SIGNIFICANT_DIGITS)
    )
    result: list[float | str] = np.where(nonzero, rounded, array).tolist()
    for index in np.flatnonzero(nonzero & ~sure).tolist():
        result[index] = float(f"{values[index]:.6g}")
    return result
