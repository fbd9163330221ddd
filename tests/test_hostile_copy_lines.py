"""The lines a case tells the reader to copy are code (a shell command, a Python call), and the
names in them are a stranger's. Pasted, they must do what they say and nothing else (red team,
session 27: a run folder named `run;touch PWNED;x` and a checkpoint folder holding a quote ran
their commands when the replay line and the Trainer's resume line were pasted)."""

from __future__ import annotations

import ast
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import tscope

RUN = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "trainer" / "lr_jump_persistent"
SHELL_NAME = "run;touch PWNED_SHELL;x $(touch PWNED_SUB) `touch PWNED_TICK`"
PYTHON_NAME = 'o"+__import__("os").system("touch PWNED_PY")+"'


def _hostile_run(root: Path) -> Path:
    run = root / SHELL_NAME
    shutil.copytree(RUN, run)
    inner = run / PYTHON_NAME
    inner.mkdir()
    for checkpoint in list(run.glob("checkpoint-*")):
        shutil.move(str(checkpoint), str(inner / checkpoint.name))
    return run


def test_pasted_lines_run_no_command_named_in_the_input(tmp_path: Path) -> None:
    run = _hostile_run(tmp_path / "in")
    summary = tscope.analyze(run).summary
    assert summary.card is not None and summary.card.restart is not None
    resume_line = summary.card.restart.command
    assert resume_line is not None
    replay_line = next(
        re.search(r"`(tscope replay .*? --entry replay_entry\.py)`", step).group(1)  # type: ignore[union-attr]
        for step in summary.next_steps
        if "tscope replay" in step
    )

    # Each line, read back, holds the exact path it names.
    argument = ast.parse(resume_line, mode="eval").body
    assert isinstance(argument, ast.Call)
    assert ast.literal_eval(argument.keywords[0].value) == f"{PYTHON_NAME}/checkpoint-120"
    assert shlex.split(replay_line)[2] == str(run)

    # Pasted as a reader would, with `tscope` and `trainer` stand-ins: nothing is created.
    paste = tmp_path / "paste"
    paste.mkdir()
    subprocess.run(["bash", "-c", f"tscope() {{ :; }}; {replay_line}"], cwd=paste, check=True)
    stand_in = "class Trainer:\n    def train(self, **options): pass\ntrainer = Trainer()\n"
    subprocess.run([sys.executable, "-c", stand_in + resume_line], cwd=paste, check=True)
    assert sorted(p.name for p in paste.iterdir()) == []
