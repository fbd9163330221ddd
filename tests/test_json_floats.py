"""Chart floats rounded by numpy at once are the numbers the per-item string rounding gives."""

from __future__ import annotations

import numpy as np
import pytest

from tscope.model.case import json_safe
from tscope.model.json_floats import rounded_floats


def _by_strings(values: list[float]) -> list[float]:
    return [float(f"{value:.6g}") for value in values]


def _same(got: list[float | str], expected: list[float]) -> bool:
    return all(
        type(a) is float and a == b and np.signbit(a) == np.signbit(b)
        for a, b in zip(got, expected, strict=True)
    )


@pytest.mark.parametrize("seed", range(3))
def test_rounding_matches_the_string_way_over_every_magnitude(seed):
    rng = np.random.default_rng(seed)
    values = (10.0 ** rng.uniform(-30, 30, 20_000) * rng.choice([-1, 1], 20_000)).tolist()
    got = rounded_floats(values)
    assert got is not None and _same(got, _by_strings(values))


def test_decimal_ties_powers_of_ten_and_their_neighbours_match():
    rng = np.random.default_rng(7)
    exponents = rng.integers(-25, 25, 3000)
    # seven significant digits ending in 5: a tie in decimal, decided by the binary value
    ties = (rng.integers(100_000, 999_999, 3000) * 10 + 5) * 10.0 ** (exponents - 6)
    powers = 10.0**exponents
    edges = [
        0.0,
        -0.0,
        5e-324,
        1.7976931348623157e308,
        -2.2250738585072014e-308,
        0.5,
        2.5,
        0.1234565,
    ]
    values = (
        np.concatenate(
            [
                ties,
                powers,
                np.nextafter(powers, 0),
                np.nextafter(powers, np.inf),
                powers * 0.9999995,
            ]
        ).tolist()
        + edges
    )
    got = rounded_floats(values)
    assert got is not None and _same(got, _by_strings(values))


def test_a_list_with_a_non_finite_float_is_left_to_json_safe_per_item():
    values = [float(v) for v in range(200)] + [float("nan"), float("-inf")]
    assert rounded_floats(values) is None
    assert json_safe(values)[-2:] == ["nan", "-inf"]
    assert json_safe(values)[:200] == _by_strings(values[:200])


def test_integers_wider_than_int64_are_written_as_report_reads_them():
    # `tscope report` refuses an integer beyond int64 in case.json (not written by tscope).
    import numpy as np

    safe = json_safe({"a": 10**4000, "b": -(10**30), "c": 2**63 - 1, "d": np.int64(7)})
    assert safe == {"a": "inf", "b": -1e30, "c": 2**63 - 1, "d": 7}
