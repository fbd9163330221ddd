"""case.html: one self-contained page (inline CSS and SVG, no script, no network).

Autoescaping is on for the whole template: every string from the payload (metric names, paths,
config values, messages) comes out as text, never as markup. The only markup inserted unescaped is
the SVG built by tscope.render.charts, which escapes its own text.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from markupsafe import Markup, escape

from tscope.model.case import Case
from tscope.model.visible_text import visible_keeping_layout
from tscope.render.charts import CHART_NAMES, Chart
from tscope.render.view import build_view, template_environment

# Text between backticks is a command or a name to copy: `tscope replay run/ --around 73`.
CODE_SPAN = re.compile(r"`([^`\n]+)`")


def render_html(case: Case, charts: Mapping[str, Chart]) -> str:
    environment = template_environment(autoescape=True)
    environment.filters["inline"] = inline_html
    template = environment.get_template("case.html.j2")
    drawn: dict[str, Any] = dict.fromkeys(CHART_NAMES)
    for name, chart in charts.items():
        drawn[name] = {"svg": Markup(chart.svg), "notes": list(chart.notes)}
    return template.render(view=build_view(case), charts=drawn)


def inline_html(value: object) -> Markup:
    """Escaped text, with `backticked` spans set as <code> so commands stand out and copy cleanly."""
    text = visible_keeping_layout(str(value))  # Markup is not finalized: escape controls here
    pieces: list[Markup] = []
    position = 0
    for match in CODE_SPAN.finditer(text):
        pieces.append(escape(text[position : match.start()]))
        pieces.append(Markup("<code>{}</code>").format(match.group(1)))
        position = match.end()
    pieces.append(escape(text[position:]))
    return Markup("").join(pieces)
