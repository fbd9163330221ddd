"""Digits as int() reads them, in names that come from strangers' files."""

from __future__ import annotations


def is_plain_digits(text: str) -> bool:
    """ASCII digits only. str.isdigit() also accepts '²' and other digits that int() refuses:
    a checkpoint folder `checkpoint-²`, a parameter `h.².mlp.weight` or an optimizer group keyed
    '²' passed the test and ended in a ValueError traceback."""
    return text.isascii() and text.isdigit()
