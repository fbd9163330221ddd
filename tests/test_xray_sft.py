"""tscope xray RUN_DIR on TRL SFTTrainer runs: the saved SFTConfig is recognized and the real
SFTTrainer step (TRL's dataset preparation, packing and collator) runs on the tracer.

The runs are written at test time by the real SFTTrainer (tests/xray_sft_run.py): no packing,
BFD packing with padding_free (position_ids restart per sequence: clean), and packing with the
"wrapped" strategy (one attention mask over the packed row: gradient leaks between sequences).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("trl")

from typer.testing import CliRunner

from tscope.analyzers.xray import xray_findings
from tscope.cli import app
from tscope.xray.trainer_run import read_settings, xray_trainer_run

MAKE_RUN = Path(__file__).resolve().parent / "xray_sft_run.py"
LENGTHS = (5, 9, 3, 12)  # per_device 2 × accumulation 2: one step takes four sequences


def _make_run(tmp_path_factory: pytest.TempPathFactory, name: str, *flags: str) -> Path:
    out = tmp_path_factory.mktemp(name) / "run"
    subprocess.run(
        [sys.executable, str(MAKE_RUN), str(out), *flags],
        check=True, capture_output=True, env={**os.environ, "OMP_NUM_THREADS": "1"}, timeout=600,
    )  # fmt: skip
    return out


@pytest.fixture(scope="module")
def plain_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make_run(tmp_path_factory, "sft-plain")


@pytest.fixture(scope="module")
def padding_free_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make_run(tmp_path_factory, "sft-bfd", "--packing", "--padding-free")


@pytest.fixture(scope="module")
def wrapped_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _make_run(tmp_path_factory, "sft-wrapped", "--packing", "--strategy", "wrapped")


def _largest_leak(matrix: tuple[tuple[float, ...], ...]) -> float:
    return max(v for i, row in enumerate(matrix) for j, v in enumerate(row) if i != j)


def test_the_saved_sftconfig_is_recognized(padding_free_run: Path, wrapped_run: Path) -> None:
    settings, notes = read_settings(padding_free_run)
    assert settings.trainer == "SFTTrainer"
    assert settings.packing and settings.packing_strategy == "bfd"
    assert settings.max_length == 64 and settings.gradient_accumulation_steps == 2
    assert any("SFTTrainer run (SFTConfig)" in note for note in notes)
    wrapped, _ = read_settings(wrapped_run)
    assert wrapped.packing_strategy == "wrapped" and not wrapped.padding_free


def test_an_sft_step_without_packing_is_clean(plain_run: Path) -> None:
    result = xray_trainer_run(plain_run, LENGTHS)
    assert result.settings["trainer"] == "SFTTrainer"
    assert "token_mean" in result.matched_rules
    token_mean = result.fit("token_mean")
    assert token_mean is not None and token_mean.max_deviation < 1e-4
    assert _largest_leak(result.leak_matrix) == 0.0
    assert not [f for f in xray_findings(result) if f.severity != "info"]


def test_padding_free_packing_with_position_ids_is_clean(padding_free_run: Path) -> None:
    result = xray_trainer_run(padding_free_run, LENGTHS)
    assert "token_mean" in result.matched_rules
    # The packed row's attention is split at every position_ids restart: exactly zero.
    assert _largest_leak(result.leak_matrix) == 0.0
    categories = {f.category for f in xray_findings(result)}
    assert "cross_sequence_leak" not in categories


def test_packing_without_boundaries_is_a_cross_sequence_leak(
    wrapped_run: Path, tmp_path: Path
) -> None:
    out = tmp_path / "case"
    outcome = CliRunner().invoke(app, ["xray", str(wrapped_run), "--out", str(out), "--quiet"])
    assert outcome.exit_code == 0, outcome.output
    xray = json.loads((out / "xray.json").read_text())
    assert xray["settings"]["packing_strategy"] == "wrapped"
    leaks = [f for f in xray["findings"] if f["category"] == "cross_sequence_leak"]
    assert leaks and leaks[0]["severity"] in ("warning", "critical")
    case = json.loads((out / "case.json").read_text())
    assert any(f["category"] == "cross_sequence_leak" for f in case["findings"])
