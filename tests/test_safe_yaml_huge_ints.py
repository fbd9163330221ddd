"""Integers beyond float range in a stranger's YAML (a W&B files/config.yaml) become ±inf."""

from __future__ import annotations

import math

import pytest

from tscope.errors import UnreadableInput
from tscope.ingest import safe_yaml


@pytest.mark.parametrize(
    ("printed", "expected"),
    [("9" * 400, math.inf), ("-" + "9" * 400, -math.inf), ("0x" + "f" * 5000, math.inf)],
)
def test_an_integer_beyond_float_range_is_an_infinite_float(printed: str, expected: float):
    loaded = safe_yaml.load(f"wandb_version: 1\nbatch:\n  value: {printed}\n", "config.yaml")
    assert loaded["batch"]["value"] == expected


def test_an_integer_past_the_digit_limit_is_one_unreadable_line():
    with pytest.raises(UnreadableInput, match=r"config\.yaml"):
        safe_yaml.load(f"batch: {'9' * 5000}\n", "config.yaml")
