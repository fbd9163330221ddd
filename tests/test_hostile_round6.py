"""Red team round 6 (session 29): a hard link that reads a file outside the input, a chart axis
over a subnormal range, and a name pattern that backtracked quadratically. Each input is the
smallest that showed it."""

from __future__ import annotations

import json
import math
import os
import random
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

import tscope
from tscope.analyzers.loss_weights import loss_weight_names, names_a_loss_weight
from tscope.cli import app
from tscope.ingest.safe_fs import HARD_LINK_OUTSIDE
from tscope.render.series import nice_ticks

SECRET = "dXNlcjpTRUNSRVRQQVNT"


def _run_with_a_linked_config(tmp_path: Path, elsewhere: Path) -> Path:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text(
        "".join(
            json.dumps({"step": s, "loss": 3 * math.exp(-s / 30) + 0.2}) + "\n" for s in range(100)
        )
    )
    elsewhere.parent.mkdir(parents=True, exist_ok=True)
    elsewhere.write_text(json.dumps({"auths": {"ghcr.io": {"auth": SECRET}}, "n_layer": 2}))
    os.link(elsewhere, run / "config.json")
    return run


def _written(run: Path, out: Path) -> Path:
    result = CliRunner().invoke(app, ["analyze", str(run), "--out", str(out), "--quiet"])
    assert result.exit_code == 0, result.output
    return out


def test_a_hard_link_to_a_file_outside_the_input_is_not_read(tmp_path: Path) -> None:
    """A config.json hard-linked to ~/.docker/config.json had its registry token copied into
    case.json and case.md: a regular file, not a symlink, so nothing refused it."""
    run = _run_with_a_linked_config(tmp_path, tmp_path / "home" / ".docker" / "config.json")
    case = tscope.analyze(run)
    assert [(p.path, p.problem) for p in case.partial] == [("config.json", HARD_LINK_OUTSIDE)]
    out = _written(run, tmp_path / "out")
    for written in out.iterdir():
        assert SECRET not in written.read_text(errors="replace"), written.name


def test_hard_links_whose_every_name_is_inside_the_input_are_read(tmp_path: Path) -> None:
    """A copy of the config made with `cp -al` inside the run (a snapshot folder) is the same
    file under two names, both inside: read as usual."""
    run = _run_with_a_linked_config(tmp_path, tmp_path / "run" / "snapshot" / "config.json")
    case = tscope.analyze(run)
    assert case.partial == []
    assert case.run.config.get("model_config.n_layer") == 2


def test_a_series_over_a_subnormal_range_is_charted(tmp_path: Path) -> None:
    """A gradient norm logged as 0 and 5e-324 ended the chart drawing in a traceback (log10 of
    an underflowed tick step), leaving an empty case folder."""
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "loss": 2 - s / 100, "grad_norm": 5e-324 * (s % 2)} for s in range(100)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    assert (_written(run, tmp_path / "out") / "case-chart.svg").is_file()
    assert nice_ticks(0.0, 5e-324, 4) == [0.0, 5e-324]
    assert nice_ticks(0.0, 2e-323, 4) == [0.0, 2e-323]


# The pattern the hand-written matcher replaces, kept here as its specification.
_SPECIFICATION = re.compile(
    r"(?:^|[/_.\-])(?:beta|kl[_\-]?weight|\w*_weight|\w*_coef|coefficient|lambda|anneal\w*)$",
    re.IGNORECASE,
)


def test_loss_weight_names_match_their_pattern_exactly() -> None:
    atoms = ["_", "/", ".", "-", " ", "a", "x", "weight", "coef", "beta", "kl", "lambda"]
    atoms += ["anneal", "coefficient", "_weight", "é", "1", "W", "Beta", "ANNEAL", ":", "ß"]
    rng = random.Random(0)
    for _ in range(50_000):
        name = "".join(rng.choice(atoms) for _ in range(rng.randint(0, 7)))
        assert names_a_loss_weight(name) == bool(_SPECIFICATION.search(name)), name
    for name in ("train/kl_weight", "beta", "loss/aux_coef", "kl-weight", "x.annealing_factor"):
        assert names_a_loss_weight(name)
    for name in ("weight_decay", "train/weight_norm", "alphabeta", "preannealed", "lambda2"):
        assert not names_a_loss_weight(name)


@pytest.mark.parametrize("tail", ["", " ", "_weight!"])
def test_long_runs_of_underscores_are_matched_in_one_pass(tail: str) -> None:
    """1,100 columns named m<i> + 990 underscores spent 28 s in the pattern's backtracking; the
    hand matcher walks each name once (2,000 such names here would take ~50 s before)."""
    names = tuple(f"m{index}" + "_" * 990 + tail for index in range(2000))
    assert loss_weight_names(names) == ()


def test_the_cli_keeps_the_link_refusal_to_one_line(tmp_path: Path) -> None:
    run = _run_with_a_linked_config(tmp_path, tmp_path / "elsewhere.json")
    result = CliRunner().invoke(app, ["analyze", str(run), "--out", str(tmp_path / "o")])
    assert result.exit_code == 0, result.output
    assert "config.json: a hard link to a file that also has a name outside" in result.output
    assert SECRET not in result.output
