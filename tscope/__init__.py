"""tscope: offline post-mortem analyzer for LLM training runs.

import tscope
case = tscope.analyze("runs/my-run")
tscope.render_case(case, "case-dir")
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

if TYPE_CHECKING:
    from tscope.model import Case


def analyze(*paths: Any, **options: Any) -> Case:
    """Read every run artifact under `paths` and return the case (see tscope.pipeline.analyze)."""
    from tscope.pipeline import analyze as _analyze

    case: Case = _analyze(*paths, **options)
    return case


def render_case(
    case: Case, out_dir: Any, formats: tuple[str, ...] = ("html", "md", "json")
) -> list[Any]:
    """Write case.html / case.md / case.json into out_dir; returns the written paths."""
    from tscope.render import render_case as _render

    written: list[Any] = _render(case, out_dir, formats)
    return written
