"""Every character that acts or hides instead of printing is shown as its escape
(tscope/model/visible_text.py): controls, bidi overrides, lone surrogates, and every Unicode
format character (category Cf): the tag characters U+E0000–U+E007F spell hidden text inside a
name that looks plain, and zero-width spaces and the BOM hide in names too (red team, session
26: written raw to case.md, case.html and the SVGs)."""

from __future__ import annotations

import sys
import unicodedata

from tscope.model.visible_text import CONTROL_CHARACTERS, CONTROL_CHARACTERS_BUT_LAYOUT, visible


def test_every_format_character_is_escaped():
    format_characters = [
        chr(code) for code in range(sys.maxunicode + 1) if unicodedata.category(chr(code)) == "Cf"
    ]
    assert format_characters
    for pattern in (CONTROL_CHARACTERS, CONTROL_CHARACTERS_BUT_LAYOUT):
        assert [c for c in format_characters if not pattern.match(c)] == []


def test_hidden_text_in_a_name_is_shown_as_escapes():
    hidden = "".join(chr(0xE0000 + ord(c)) for c in "IGNORE")
    shown = visible(f"train/loss{hidden}\u200b\ufeff")
    assert shown == "train/loss" + "".join(f"\\U{0xE0000 + ord(c):08x}" for c in "IGNORE") + (
        "\\u200b\\ufeff"
    )
    assert shown.isascii()


def test_printing_characters_stay_as_they_are():
    assert visible("Loss/train λ ü 学習 😀") == "Loss/train λ ü 学習 😀"
