"""Every example in examples/ runs."""

from __future__ import annotations

import os
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


README = Path(__file__).resolve().parents[1] / "README.md"
REPO = README.parent


def readme_commands(needle: str) -> list[list[str]]:
    """The README's shell lines that contain `needle`, split into words."""
    return [
        line.split() for line in README.read_text(encoding="utf-8").splitlines() if needle in line
    ]


def option(words: list[str], name: str) -> str:
    return words[words.index(name) + 1]


def test_the_readme_says_how_to_replay_the_demo_run_and_it_fits_the_demo():
    """The demo itself takes half a minute; tests/test_replay_core.py replays a shorter demo run
    with the same entry file. Here: the documented command names the demo's run folder, an entry
    file that exists and the first step that shows the planted jump."""
    from tscope.cli import demo
    from tscope.demo.train import DEFAULT_STEPS, PLANTED_AT_FRACTION

    [words] = [w for w in readme_commands("tscope replay tscope-demo/run") if w[0] != "$"]
    default_out = str(demo.__defaults__[0]) if demo.__defaults__ else "tscope-demo"
    assert words[2] == f"{default_out}/run"
    assert (REPO / option(words, "--entry")).is_file()
    planted = round(DEFAULT_STEPS * PLANTED_AT_FRACTION)
    assert int(option(words, "--around")) == planted + 1  # the first loss the jump moves


def test_the_readme_fixture_replay_runs_as_written(tmp_path):
    [words] = readme_commands("TSCOPE_FIXTURE_RUN=corrupted_batch")
    variable, value = words[0].split("=")
    assert words[1] == ".venv/bin/tscope"
    for folder in ("fixtures", "examples"):  # the README runs from the repository's root
        (tmp_path / folder).symlink_to(REPO / folder, target_is_directory=True)
    result = subprocess.run(
        [sys.executable, "-m", "tscope", *words[2:], "--no-stats", "--quiet"],
        cwd=tmp_path,
        env={**os.environ, variable: value},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "corrupted-replay/case.html"
    assert (tmp_path / "corrupted-replay" / "replay.json").is_file()
