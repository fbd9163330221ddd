"""A stranger's configuration cannot blow up the report (red-team round 3): a 1 MB key became one
1 MB table row, and 150,000 keys an 11 MB case.html. Keys are cut like values, and the table
shows the first MAX_CONFIG_ROWS settings and counts the rest (case.json keeps them all)."""

from __future__ import annotations

import json
from pathlib import Path

import tscope
from tscope.render import render_case
from tscope.render.formatting import MAX_CONFIG_ROWS, MAX_VALUE_CHARS


def _run(tmp_path: Path, config: dict[str, object]) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    rows = "\n".join(f"{step},{3.0 - step * 0.001}" for step in range(100))
    (run / "metrics.csv").write_text("step,train/loss\n" + rows)
    (run / "config.json").write_text(json.dumps(config))
    return run


def test_a_huge_key_and_many_keys_stay_bounded_in_the_report(tmp_path: Path) -> None:
    config: dict[str, object] = {"k" * 100_000: 1}
    config.update({f"setting_{i}": i for i in range(2 * MAX_CONFIG_ROWS)})
    case = tscope.analyze(_run(tmp_path, config))
    out = tmp_path / "case"
    render_case(case, out, ("html", "md"))
    hidden = len(config) - MAX_CONFIG_ROWS
    for name in ("case.html", "case.md"):
        text = (out / name).read_text()
        assert "k" * (MAX_VALUE_CHARS + 1) not in text  # the key cut like a value
        assert f"{hidden:,} more, listed in case.json" in text
    assert len(case.run.config) == len(config)  # case.json keeps every setting
