"""SVG primitives shared by the charts: the document, escaped text, lines and markers.

Text from the logs goes through `xml_text`, which escapes markup and shows control characters as
their escapes (`\\x1b`, `\\u202e`: XML forbids most of them raw), so a metric named `<script>` is
drawn as those characters and the file stays valid both inline in case.html and as a standalone
case-chart.svg.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from markupsafe import escape

from tscope.model.visible_text import visible

CHAR_WIDTH = 6.4  # average advance of an 11 px sans-serif glyph, for layout and overlap checks
FONT_FAMILY = "DejaVu Sans, Helvetica, Arial, sans-serif"
INK = "#1a1a1a"
_XML_FORBIDDEN = re.compile("[\ufffe\uffff]")  # non-characters; the controls are made visible


def xml_text(value: object) -> str:
    return str(escape(visible(_XML_FORBIDDEN.sub("", str(value)))))


def svg_document(width: float, height: float, title: str, body: Sequence[str]) -> str:
    """A standalone SVG (valid inline in HTML too): white background so dark viewers show it."""
    head = (
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width:.0f}" height="{height:.0f}" '
        f'viewBox="0 0 {width:.0f} {height:.0f}" font-family="{FONT_FAMILY}" font-size="11" '
        f'role="img">'
    )
    return "\n".join(
        [
            head,
            f"<title>{xml_text(title)}</title>",
            f'<rect width="{width:.0f}" height="{height:.0f}" fill="#ffffff"/>',
            *body,
            "</svg>",
        ]
    )


def text(
    x: float,
    y: float,
    content: object,
    anchor: str = "start",
    color: str = INK,
    weight: str = "normal",
    size: int = 11,
    halo: bool = False,
) -> str:
    """A text label; `halo` rings it in white so it stays legible where it crosses a data line."""
    attributes = f'x="{x:.1f}" y="{y:.1f}" fill="{color}"'
    if halo:
        attributes += ' stroke="#ffffff" stroke-width="3" paint-order="stroke"'
    if anchor != "start":
        attributes += f' text-anchor="{anchor}"'
    if weight != "normal":
        attributes += f' font-weight="{weight}"'
    if size != 11:
        attributes += f' font-size="{size}"'
    return f"<text {attributes}>{xml_text(content)}</text>"


def line(x1: float, y1: float, x2: float, y2: float, color: str, dash: str = "") -> str:
    dash_attribute = f' stroke-dasharray="{dash}"' if dash else ""
    return (
        f'<line x1="{x1:.1f}" y1="{y1:.1f}" x2="{x2:.1f}" y2="{y2:.1f}" '
        f'stroke="{color}" stroke-width="1"{dash_attribute}/>'
    )


def rect(x: float, y: float, width: float, height: float, fill: str, extra: str = "") -> str:
    """A filled rectangle; `extra` carries further attributes (class, opacity, stroke)."""
    tail = f" {extra}" if extra else ""
    return (
        f'<rect x="{x:.1f}" y="{y:.1f}" width="{width:.1f}" height="{height:.1f}" '
        f'fill="{fill}"{tail}/>'
    )


def triangle(x: float, top: float, color: str, pointing_down: bool) -> str:
    """A 8x7 px marker whose tip touches `top` + 7 (down) or `top` (up)."""
    tip, base = (top + 7, top) if pointing_down else (top, top + 7)
    points = f"{x - 4:.1f},{base:.1f} {x + 4:.1f},{base:.1f} {x:.1f},{tip:.1f}"
    return f'<polygon points="{points}" fill="{color}"/>'


def tooltip(content: object) -> str:
    """A <title> child: the full text on hover where the drawing had to shorten it."""
    return f"<title>{xml_text(content)}</title>"
