"""`tscope xray --entry FILE` on its own: the first screen is the audit's (a new user saw
"Insufficient data: no loss series was found" above the audit's own warning, and was told to
log the loss: an entry has no logs by design)."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from tscope.cli import app

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _case(entry: str, out: Path) -> dict:
    result = CliRunner().invoke(
        app, ["xray", "--entry", str(EXAMPLES / entry), "-o", str(out), "-q"]
    )
    assert result.exit_code == 0, result.output
    return json.loads((out / "case.json").read_text(encoding="utf-8"))


def test_an_entry_with_a_weighting_warning_is_headlined_by_it(tmp_path: Path) -> None:
    case = _case("xray_entry_micro_batch_mean.py", tmp_path / "case")
    summary = case["summary"]
    assert summary["status"] == "incident"
    assert summary["card"]["cause"]["category"] == "token_weighting_mismatch"
    assert "micro_batch_mean" in summary["verdict"]
    assert "Insufficient data" not in summary["verdict"]
    markdown = (tmp_path / "case" / "case.md").read_text(encoding="utf-8")
    assert "| When | not one step" in markdown


def test_a_clean_entry_says_the_audit_is_clean(tmp_path: Path) -> None:
    case = _case("xray_entry_token_mean.py", tmp_path / "case")
    assert case["summary"]["status"] == "healthy"
    assert case["summary"]["verdict"].startswith("Token audit")
