"""Every example in examples/ runs."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

# Entry files are imported by `tscope replay` / `tscope xray`, not run: tests/test_replay_core.py
# and tests/test_xray.py run them.
EXAMPLES = sorted(
    p
    for p in (Path(__file__).resolve().parents[1] / "examples").glob("*.py")
    if not p.name.startswith(("replay_entry_", "xray_entry_"))
)


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.name)
def test_example_runs(example, tmp_path):
    result = subprocess.run(
        [
            sys.executable,
            str(example),
            str(example.parents[1] / "fixtures/data/trainer/lr_jump"),
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert "lr_schedule_jump" in result.stdout
