"""Layout estimates for rendered pages, computed from the markup and not from pixels, so CI can
check them without a browser.

SVG labels: each <text> becomes a box from its x, anchor and font size, with the glyph-width
estimate the charts place labels by (svg.CHAR_WIDTH per 11 px glyph, bold 10 % wider). Tables:
the narrowest each column can be (its longest unbreakable word, or its whole text where the CSS
forbids wrapping), summed with the cell padding, against the page's content width.
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ElementTree
from dataclasses import dataclass, field
from html.parser import HTMLParser

from tscope.render.svg import CHAR_WIDTH

SVG = "{http://www.w3.org/2000/svg}"
DEFAULT_FONT_PX = 11.0  # svg_document's font-size
# The narrowest browser window the page must fit: the body's 28 px padding either side leaves
# this much for the content (case.css caps the body at 1180 px on wider windows).
NARROW_WINDOW_PX = 1000
CONTENT_PX = NARROW_WINDOW_PX - 2 * 28
TABLE_FONT_PX = 15 * 0.86  # case.css: table { font-size: 0.86rem }
CELL_PADDING_PX = 2 * 7 + 1  # th, td { padding: 4px 7px; border: 1px }
EM_PX = TABLE_FONT_PX
# Cells whose CSS keeps them on one line, and elements whose text may break anywhere.
NOWRAP_CLASSES = {"num", "nowrap", "finding-id"}
BREAK_ANYWHERE_TAGS = {"code"}
# Minimum widths case.css gives some cells (td.prose, td.name), in em.
MIN_WIDTH_EM = {"prose": 13.0, "name": 6.0}


@dataclass(frozen=True)
class LabelBox:
    content: str
    left: float
    right: float
    top: float
    bottom: float

    def overlaps(self, other: LabelBox, tolerance: float = 0.5) -> bool:
        return (
            self.left < other.right - tolerance
            and other.left < self.right - tolerance
            and self.top < other.bottom - tolerance
            and other.top < self.bottom - tolerance
        )


def glyph_width(font_px: float, bold: bool = False) -> float:
    return CHAR_WIDTH * font_px / DEFAULT_FONT_PX * (1.1 if bold else 1.0)


def svg_label_boxes(svg: str) -> tuple[float, list[LabelBox]]:
    """The drawing's width and a box per visible text label (tooltips are not drawn)."""
    root = ElementTree.fromstring(svg)
    width = float(root.get("width", "0"))
    root_size = float(root.get("font-size", DEFAULT_FONT_PX))
    boxes = []
    for element in root.iter(f"{SVG}text"):
        content = "".join(_visible_text(element))
        if not content.strip():
            continue
        size = float(element.get("font-size", root_size))
        bold = element.get("font-weight") == "bold"
        advance = len(content) * glyph_width(size, bold)
        x, y = float(element.get("x", "0")), float(element.get("y", "0"))
        anchor = element.get("text-anchor", "start")
        left = x - advance if anchor == "end" else x - advance / 2 if anchor == "middle" else x
        # A baseline at y: ascenders reach about 0.8 em above it, descenders 0.2 em below.
        boxes.append(LabelBox(content, left, left + advance, y - 0.8 * size, y + 0.2 * size))
    return width, boxes


def _visible_text(element: ElementTree.Element) -> list[str]:
    pieces = [element.text or ""]
    for child in element:
        if child.tag != f"{SVG}title":
            pieces.extend(_visible_text(child))
        pieces.append(child.tail or "")
    return pieces


def overlapping_labels(boxes: list[LabelBox]) -> list[tuple[str, str]]:
    ordered = sorted(boxes, key=lambda box: box.left)
    clashes = []
    for index, box in enumerate(ordered):
        for other in ordered[index + 1 :]:
            if other.left >= box.right:
                break
            if box.overlaps(other):
                clashes.append((box.content, other.content))
    return clashes


def inline_svgs(html: str) -> list[str]:
    return re.findall(r"<svg .*?</svg>", html, flags=re.DOTALL)


@dataclass
class _Cell:
    classes: set[str]
    words: list[tuple[str, bool]] = field(default_factory=list)  # (text, may break anywhere)
    nowrap_text: list[str] = field(default_factory=list)


class _TableParser(HTMLParser):
    """Collects each table's rows of cells with the text that constrains their width."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.tables: list[list[list[_Cell]]] = []
        self._stack: list[tuple[str, set[str]]] = []
        self._open_tables: list[list[list[_Cell]]] = []
        self._cell: _Cell | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        classes = set((dict(attrs).get("class") or "").split())
        self._stack.append((tag, classes))
        if tag == "table":
            self._open_tables.append([])
        elif tag == "tr" and self._open_tables:
            self._open_tables[-1].append([])
        elif tag in ("td", "th") and self._open_tables and self._open_tables[-1]:
            self._cell = _Cell(classes)
            self._open_tables[-1][-1].append(self._cell)

    def handle_endtag(self, tag: str) -> None:
        while self._stack:
            open_tag, _ = self._stack.pop()
            if open_tag == tag:
                break
        if tag in ("td", "th"):
            self._cell = None
        elif tag == "table" and self._open_tables:
            self.tables.append(self._open_tables.pop())

    def handle_data(self, data: str) -> None:
        if self._cell is None or not data.strip():
            return
        tags = [tag for tag, _ in self._stack]
        if "summary" in tags or ("details" in tags and "dd" not in tags and "dt" not in tags):
            return
        if "dt" in tags:  # evidence keys never break (white-space: nowrap)
            self._cell.nowrap_text.append(data.strip())
            return
        if self._cell.classes & NOWRAP_CLASSES:
            self._cell.nowrap_text.append(data.strip())
            return
        anywhere = bool(BREAK_ANYWHERE_TAGS & set(tags)) or "dd" in tags
        self._cell.words.extend((word, anywhere) for word in data.split())


def table_min_widths(html: str) -> list[tuple[float, str]]:
    """Per table: the narrowest it can be laid out, in px, and its header row for messages."""
    parser = _TableParser()
    parser.feed(html)
    results = []
    glyph = glyph_width(TABLE_FONT_PX)
    for rows in parser.tables:
        columns: dict[int, float] = {}
        for row in rows:
            for index, cell in enumerate(row):
                longest_word = max(
                    (1 if anywhere else len(word) for word, anywhere in cell.words), default=0
                )
                longest_nowrap = max((len(text) for text in cell.nowrap_text), default=0)
                # A cell with a dl of evidence: the longest key plus the narrowest value beside it.
                needed = max(longest_word, longest_nowrap) * glyph + CELL_PADDING_PX
                for name, em in MIN_WIDTH_EM.items():
                    if name in cell.classes:
                        needed = max(needed, em * EM_PX + CELL_PADDING_PX)
                columns[index] = max(columns.get(index, 0.0), needed)
        header = " | ".join(
            " ".join(word for word, _ in cell.words) for cell in (rows[0] if rows else [])
        )
        results.append((sum(columns.values()), header))
    return results
