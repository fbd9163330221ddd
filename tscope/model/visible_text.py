"""How a stranger's text (a file name, a metric name, a logged value, a parser's error) is shown.

File names and log values may hold characters that act instead of printing: a newline fakes a
second output line ("FAKE: all good"), ESC starts a terminal escape (clear the screen, set the
window title), NUL cuts strings short, and the bidi overrides U+202A–U+202E / U+2066–U+2069 make
`gpj.exe` read as `exe.jpg`. Every place tscope prints or renders such text goes through
`visible()` (the CLI's stderr lines, progress, warnings; case.html, case.md, cluster pages and SVG
labels), so the characters appear as their escape (`\\n`, `\\x1b`, `\\u202e`) and nothing acts.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

# C0 controls (newline and tab included), DEL and the C1 controls (U+0080–U+009F, where 0x9B is a
# one-byte CSI), the Unicode line and paragraph separators, every bidi control (the embeddings
# and overrides U+202A–U+202E, the isolates U+2066–U+2069, and the marks LRM, RLM and ALM), and
# lone surrogates: Python decodes a file name that is not UTF-8 with surrogateescape (byte 0xff
# becomes U+DCFF), and no UTF-8 writer or terminal can encode one (a `metrics\xff.csv` once
# ended the analysis in a UnicodeEncodeError while writing case.html).
# Also every other Unicode format character (category Cf, Unicode 15): zero-width spaces and
# joiners, the BOM, invisible operators, and the tag characters U+E0000–U+E007F, which spell
# hidden text inside a name that looks plain (red team, session 26). tests/test_visible_text.py
# checks the list against unicodedata.
_FORMAT_CHARACTERS = (
    "\u00ad\u0600-\u0605\u061c\u06dd\u070f\u0890\u0891\u08e2\u180e\u200b-\u200f"
    "\u202a-\u202e\u2060-\u2064\u2066-\u206f\ufeff\ufff9-\ufffb\U000110bd\U000110cd"
    "\U00013430-\U0001343f\U0001bca0-\U0001bca3\U0001d173-\U0001d17a\U000e0001"
    "\U000e0020-\U000e007f"
)
CONTROL_CHARACTERS = re.compile(
    "[\x00-\x1f\x7f-\x9f\u2028\u2029" + _FORMAT_CHARACTERS + "\ud800-\udfff]"
)
# The same, except the two characters that lay text out in a multi-line document (a template's own
# newlines and indentation); used where tscope renders a document rather than a single name.
CONTROL_CHARACTERS_BUT_LAYOUT = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029" + _FORMAT_CHARACTERS + "\ud800-\udfff]"
)
# Lone surrogates alone: what case.json must show as text (no UTF-8 writer can encode one).
SURROGATES = re.compile("[\ud800-\udfff]")
# What case.json writes as JSON escapes (the same string once parsed) rather than raw: the
# controls json.dumps leaves raw (DEL, C1), the line separators and every format character, so
# `cat` or `jq` of a case shows no name reversed or hidden (red team, session 27: a bidi
# override from a TensorBoard tag was raw in the metrics' keys).
JSON_INVISIBLE = re.compile("[\x7f-\x9f\u2028\u2029" + _FORMAT_CHARACTERS + "]")
# surrogateescape's range: U+DC80–U+DCFF stand for the undecodable bytes 0x80–0xFF.
_ESCAPED_BYTES = range(0xDC80, 0xDD00)
# Python's own short escapes read best for the common ones.
_SHORT_ESCAPES = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def escape_character(char: str) -> str:
    """One control character as the text a reader would type for it: \\n, \\x1b, \\u202e."""
    if char in _SHORT_ESCAPES:
        return _SHORT_ESCAPES[char]
    code = ord(char)
    if code in _ESCAPED_BYTES:  # a byte of a non-UTF-8 name: shown as the byte, as bash's $'\xff'
        return f"\\x{code - 0xDC00:02x}"
    if code > 0xFFFF:
        return f"\\U{code:08x}"
    return f"\\x{code:02x}" if code <= 0xFF else f"\\u{code:04x}"


def visible(text: object) -> str:
    """`text` on one line with every control character shown as its escape."""
    return CONTROL_CHARACTERS.sub(lambda match: escape_character(match.group()), str(text))


def without_surrogates(text: str) -> str:
    """`text` with each lone surrogate as its escape (`\\xff` for a non-UTF-8 name's byte) and
    every other character kept: for text that is written as UTF-8 but not shown escaped."""
    if text.isascii() or SURROGATES.search(text) is None:
        return text
    return SURROGATES.sub(lambda match: escape_character(match.group()), text)


def visible_keeping_layout(text: str) -> str:
    """As `visible`, but newlines and tabs stay: for whole documents and multi-line values."""
    return CONTROL_CHARACTERS_BUT_LAYOUT.sub(lambda match: escape_character(match.group()), text)


# A first word that is plain lowercase letters is prose ("loss spiked", "the learning rate"); one
# with a separator, a digit or a capital is a name from the run ("train/loss", "lm_loss",
# "Loss/train") and is shown exactly as the run wrote it, even at a sentence's start.
_PROSE_WORD = re.compile(r"[a-z]+")
_ENGLISH_METRIC_NAMES = frozenset({"loss", "perplexity", "accuracy"})


def sentence_start(text: str, names: Iterable[str] = ()) -> str:
    """`text` as the start of a sentence: its first word capitalized when it is a prose word,
    left alone when it is a metric, tag or file name (those keep the run's own spelling). A
    name that looks like prose (`xent`, Megatron's `lm loss`) is known only to the caller, which
    passes the run's names as `names`; one that is also the English word (`loss`) reads as prose,
    as in REPORT.md's "Loss spiked from 2.84 to 4.45"."""
    if any(
        text == name or text.startswith(name + " ")
        for name in names
        if name and name not in _ENGLISH_METRIC_NAMES
    ):
        return text
    first_word = text.split(" ", 1)[0]
    if _PROSE_WORD.fullmatch(first_word):
        return text[:1].upper() + text[1:]
    return text


def cut_text(text: str, limit: int) -> str:
    """`text` kept to `limit` characters, the last one "…" when it was longer: one rule for every
    stranger's name or value a case keeps or shows (settings, report cells, config values)."""
    return text if len(text) <= limit else text[: limit - 1] + "…"
