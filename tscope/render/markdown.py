"""case.md: the same summary and evidence tables for GitHub and Jira; charts as SVG files beside it.

No raw HTML. Everything from the payload passes through `md_text`, `md_cell` or `md_code`, which
backslash-escape the characters Markdown would act on (so a metric named `<script>` or `**x**`
prints as written) and keep each value on one line so a table row cannot be broken.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from tscope.model.case import Case
from tscope.render.charts import CHART_NAMES, Chart
from tscope.render.formatting import MISSING, one_line
from tscope.render.html import CODE_SPAN
from tscope.render.view import build_view, template_environment

# Characters that start emphasis, links, HTML, code, headings, tables, strikethrough or entities
# anywhere in a line. CommonMark lets any ASCII punctuation be backslash-escaped.
INLINE_ACTIVE = re.compile(r"([\\`*_\[\]<>|#~&])")
# At the start of a list item these open a nested list: "- x", "+ x", "1. x", "1) x".
LEADING_BULLET = re.compile(r"^([-+])")
LEADING_NUMBER = re.compile(r"^(\d+)([.)])")


def render_markdown(case: Case, charts: Mapping[str, Chart], chart_files: Mapping[str, str]) -> str:
    environment = template_environment(autoescape=False)
    environment.filters["md"] = md_text
    environment.filters["md_cell"] = md_cell
    environment.filters["md_code"] = md_code
    template = environment.get_template("case.md.j2")
    drawn: dict[str, Any] = dict.fromkeys(CHART_NAMES)
    for name, chart in charts.items():
        drawn[name] = {"file": chart_files[name], "notes": list(chart.notes)}
    return template.render(view=build_view(case), charts=drawn)


def md_text(value: object) -> str:
    """Prose outside tables: escaped, with `backticked` commands kept as code spans."""
    return _inline(value, in_table=False)


def md_cell(value: object) -> str:
    """A table cell: as md_text, and a pipe inside a code span is escaped too (GFM splits cells
    before it parses code spans)."""
    text = _inline(value, in_table=True)
    return text or MISSING


def md_code(value: object, in_table: bool = False) -> str:
    """A literal name or path as a code span, fenced with more backticks than it contains."""
    content = one_line(str(value))
    if not content:
        return MISSING
    longest_run = max((len(run) for run in re.findall(r"`+", content)), default=0)
    fence = "`" * (longest_run + 1)
    if content.startswith("`") or content.endswith("`"):
        content = f" {content} "  # CommonMark strips one space each side when both are present
    if in_table:
        content = content.replace("|", "\\|")
    return f"{fence}{content}{fence}"


def _inline(value: object, in_table: bool) -> str:
    text = one_line(str(value))
    lead = not in_table  # a cell's content is inline: "1." or "-" there cannot open a list
    pieces: list[str] = []
    position = 0
    for match in CODE_SPAN.finditer(text):
        pieces.append(_escape(text[position : match.start()], at_start=position == 0 and lead))
        pieces.append(md_code(match.group(1), in_table=in_table))
        position = match.end()
    pieces.append(_escape(text[position:], at_start=position == 0 and lead))
    return "".join(pieces)


def _escape(text: str, at_start: bool) -> str:
    escaped = INLINE_ACTIVE.sub(r"\\\1", text)
    if at_start:
        escaped = LEADING_BULLET.sub(r"\\\1", escaped)
        escaped = LEADING_NUMBER.sub(r"\1\\\2", escaped)  # "1." -> "1\." : escape the delimiter
    return escaped
