"""How numbers, steps and log-derived values are written in every rendering of a case.

One place, so the HTML, the Markdown and the chart labels say the same number the same way:
three significant digits, steps as integers, non-finite values named.
"""

from __future__ import annotations

import json
import math
from typing import Any

from markupsafe import Markup

from tscope.model.visible_text import cut_text, visible, visible_keeping_layout

MISSING = "—"
SIGNIFICANT_DIGITS = 3
# Below 1e-3 and from 1e6 up, positional notation gets long ("0.0003", "2840000"): 3e-4, 2.84e6.
SMALLEST_POSITIONAL = 1e-3
LARGEST_POSITIONAL = 1e6
# Long log-derived values (a config list, a stack of paths) are cut so one cell cannot fill a page.
MAX_VALUE_CHARS = 200
MAX_LIST_ITEMS = 8

NONFINITE_NAMES = {"nan": "NaN", "inf": "+Inf", "+inf": "+Inf", "-inf": "-Inf"}


def parse_number(value: Any) -> float | None:
    """A payload number as a float: JSON numbers and the "nan"/"inf"/"-inf" strings; else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, str) and value.lower() in NONFINITE_NAMES:
        return float(value.lower())
    return None


def optional_float(value: float | None) -> float | None:
    """A typed case number as a float (case files keep an integer an int) for coordinates and
    colours; None stays None."""
    return None if value is None else float(value)


def format_number(value: Any) -> str:
    """3 significant digits for floats, integers in full, NaN/Inf by name, anything else as text."""
    if value is None:
        return MISSING
    if isinstance(value, bool):
        return "yes" if value else "no"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return NONFINITE_NAMES.get(value.lower(), value)
    if not isinstance(value, float):
        return str(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    if value == 0:
        return "0"
    rounded = float(f"{value:.{SIGNIFICANT_DIGITS}g}")
    if math.isinf(rounded):
        # 1.7977e308 rounds to "1.8e+308", beyond the float range: written as a mantissa and an
        # exponent from the value itself (red team, session 28: parsing it back gave inf)
        rounded = value
    if SMALLEST_POSITIONAL <= abs(rounded) < LARGEST_POSITIONAL:
        if abs(rounded) >= 10 ** (SIGNIFICANT_DIGITS - 1):
            return f"{rounded:.0f}"  # 1234.5 -> "1230", not "1.23e+03"
        return f"{rounded:.{SIGNIFICANT_DIGITS}g}"
    mantissa, exponent = f"{rounded:.{SIGNIFICANT_DIGITS - 1}e}".split("e")
    mantissa = mantissa.rstrip("0").rstrip(".")
    return f"{mantissa}e{int(exponent)}"


def format_step(value: Any) -> str:
    """Steps are optimizer steps: integers, never "73.0"."""
    if value is None:
        return MISSING
    number = parse_number(value)
    if number is not None and math.isfinite(number) and number.is_integer():
        return str(int(number))
    return format_number(value)


def format_value(value: Any) -> str:
    """Any payload value (evidence, config) as one line of text, numbers to 3 significant digits."""
    if isinstance(value, (list, tuple)):
        shown = [format_value(item) for item in value[:MAX_LIST_ITEMS]]
        if len(value) > MAX_LIST_ITEMS:
            shown.append(f"… ({len(value) - MAX_LIST_ITEMS} more)")
        return _truncate("[" + ", ".join(shown) + "]")
    if isinstance(value, dict):
        return _truncate(json.dumps(value, sort_keys=True, ensure_ascii=False, default=str))
    if isinstance(value, str):
        return _truncate(one_line(NONFINITE_NAMES.get(value.lower(), value)))
    return format_number(value)


def flatten(mapping: dict[str, Any], limit: int | None = None) -> list[tuple[str, str]]:
    """Nested dicts as sorted ("a.b", "value") rows; sorted so case.json and a Case agree. With
    `limit`, rows past it are counted in one last row instead of built (`MAX_CONFIG_ROWS`)."""
    rows: list[tuple[str, str]] = []
    total = _flatten_into(rows, mapping, "", 0, limit)
    if limit is not None and total > limit:
        rows.append(("…", f"{total - limit:,} more, listed in case.json"))
    return rows


# Levels of a nested value shown as dotted names; deeper ones are shown as their (cut) JSON.
MAX_SHOWN_DEPTH = 8


def _flatten_into(
    rows: list[tuple[str, str]], mapping: dict[str, Any], prefix: str, depth: int, limit: int | None
) -> int:
    """Append `mapping`'s rows (while fewer than `limit`); returns how many it holds in all."""
    total = 0
    for key in sorted(mapping, key=str):
        value = mapping[key]
        # Cut before joining: every level's name is alive while the next is built, and a 90-deep
        # config of 1 MB keys (90 MB) once asked for 8 GB here (red team, session 31).
        name = _truncate(f"{prefix}{_truncate(str(key))}")
        if isinstance(value, dict) and value and depth < MAX_SHOWN_DEPTH:
            total += _flatten_into(rows, value, f"{name}.", depth + 1, limit)
        else:
            # A key is a stranger's text like a value: a 1 MB key made one 1 MB table row.
            if limit is None or len(rows) < limit:
                rows.append((name, format_value(value)))
            total += 1
    return total


# Settings shown in a report's configuration table, then one row counts the rest (150,000 config
# keys once made an 11 MB case.html); case.json keeps them all.
MAX_CONFIG_ROWS = 500


def one_line(text: str) -> str:
    """Log-derived text on one line: a newline or tab must not break a table row (it becomes a
    space), and the other control characters (ESC, NUL, a bidi override) show as their escapes."""
    return visible(" ".join(str(text).split()))


# The findings a report shows and marks on its charts (ranked: the most important first): a
# crafted case.json of 200,000 findings took `tscope report` 173 s and 3 GB (red team, session
# 29); real cases hold tens. The rest stay in case.json, counted in the report.
MAX_SHOWN_FINDINGS = 1000
# A finding's text as a report shows it: real ones run to a few hundred characters; one crafted
# 100 MB message took `tscope report` 31 s (red team, session 29).
MAX_LINE_CHARS = 4000


def bounded_line(text: str) -> str:
    """one_line, cut at MAX_LINE_CHARS (whitespace folds before the cut)."""
    shown = one_line(str(text)[: MAX_LINE_CHARS * 2])
    return shown if len(shown) <= MAX_LINE_CHARS else shown[:MAX_LINE_CHARS] + "…"


def shown_in_template(value: Any) -> Any:
    """Every `{{ value }}` a template prints: control characters from a name or a logged value
    shown as escapes (docs/security.md); markup tscope built itself (charts, filters) is kept."""
    if isinstance(value, str) and not isinstance(value, Markup):
        return visible_keeping_layout(value)
    return value


def _truncate(text: str) -> str:
    return cut_text(text, MAX_VALUE_CHARS)
