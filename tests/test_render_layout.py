"""Every golden page fits a 1000 px window and no chart label is drawn over another.

Computed from the layout the renderers write (label positions × estimated glyph widths, table
columns × their longest unbreakable word), so it runs in CI with no browser; tests/layout.py
says how. Screenshots in headless Chromium at 1400 and 1000 px were checked against the same
pages when this test was written.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from case_payloads import healthy_case, incident_case, partial_payload
from layout import (
    CONTENT_PX,
    inline_svgs,
    overlapping_labels,
    svg_label_boxes,
    table_min_widths,
)
from test_cluster_render import render_synthetic
from test_render_replay_payloads import replay_payload

from tscope.model.case import Case
from tscope.render import render_case

CASES: dict[str, Callable[[], Case | dict[str, Any]]] = {
    "incident": incident_case,
    "healthy": healthy_case,
    "partial": partial_payload,
    "replay": replay_payload,
}


def golden_pages(out_dir: Path) -> dict[str, str]:
    """Each golden case's case.html, and the cluster page, rendered afresh."""
    pages = {}
    for name, build in CASES.items():
        paths = render_case(build(), out_dir / name, ("html",))
        pages[name] = paths[0].read_text(encoding="utf-8")
    pages["cluster"] = render_synthetic(out_dir / "cluster")["cluster.html"]
    return pages


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    return golden_pages(tmp_path_factory.mktemp("layout"))


@pytest.mark.parametrize("page", [*CASES, "cluster"])
def test_no_chart_label_overlaps_another_or_leaves_the_drawing(
    pages: dict[str, str], page: str
) -> None:
    svgs = inline_svgs(pages[page])
    assert svgs, f"{page} has no chart"
    for svg in svgs:
        width, boxes = svg_label_boxes(svg)
        assert boxes
        outside = [box.content for box in boxes if box.left < -0.5 or box.right > width + 0.5]
        assert not outside, f"{page}: labels past the drawing's edge: {outside}"
        clashes = overlapping_labels(boxes)
        assert not clashes, f"{page}: overlapping labels: {clashes[:5]}"


@pytest.mark.parametrize("page", [*CASES, "cluster"])
def test_every_table_fits_a_1000_px_window(pages: dict[str, str], page: str) -> None:
    too_wide = [
        (round(width), header)
        for width, header in table_min_widths(pages[page])
        if width > CONTENT_PX
    ]
    assert not too_wide, f"{page}: tables wider than {CONTENT_PX} px: {too_wide}"


def test_the_estimate_catches_labels_drawn_over_each_other() -> None:
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="200" height="40" font-size="11">'
        '<text x="10" y="20">851 @ 180</text><text x="30" y="22">1010 @ 182</text>'
        '<text x="150" y="20">apart<title>a tooltip is not drawn</title></text></svg>'
    )
    width, boxes = svg_label_boxes(svg)
    assert width == 200 and [box.content for box in boxes][2] == "apart"
    assert overlapping_labels(boxes) == [("851 @ 180", "1010 @ 182")]


def test_the_estimate_catches_a_table_wider_than_the_page() -> None:
    long_key = "x" * 150  # one unbreakable word: about 1,100 px at the table's font size
    html = f'<table><tr><td class="nowrap">{long_key}</td><td>short</td></tr></table>'
    ((width, _),) = table_min_widths(html)
    assert width > CONTENT_PX
    wrapped = f"<table><tr><td><code>{long_key}</code></td></tr></table>"  # code breaks anywhere
    assert table_min_widths(wrapped)[0][0] < CONTENT_PX
