"""Shared by the Replay-section render tests: the files a render wrote, and an SVG's text."""

from __future__ import annotations

import xml.etree.ElementTree as ElementTree
from pathlib import Path

SVG_NS = "{http://www.w3.org/2000/svg}"


def files_of(paths: list[Path]) -> dict[str, str]:
    return {path.name: path.read_text(encoding="utf-8") for path in paths}


def svg_text(svg: str) -> str:
    return "".join(ElementTree.fromstring(svg).itertext())
