"""Files and folders a reader opens by name, not through discovery (red-team wave 2).

DeepSpeed's `latest` names the tag a resume loads; the reader quotes it in the checkpoint's notes.
It was read with `Path.read_text`: a `latest` linked to a secret had its first 80 characters
printed in case.html/md/json (a read outside the input, and a leak), and a FIFO named `latest`
blocked `tscope analyze` forever. Sub-folders a reader steps into by name (DeepSpeed's `zero/`,
accelerate's `optimizer_0/` DCP folder, W&B's `files/`) were followed when linked: discovery
listed the link as "not followed" while the reader read through it (34 opens under a linked
`optimizer_0/`; a linked `files/config.yaml` value quoted in the case).
Each runs the real CLI in a child under limits.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pandas as pd
import pytest
from hostile import run_tscope
from test_hostile_checkpoints import write_metrics

LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layouts"
WANDB_FIXTURE = Path(__file__).resolve().parent / "data" / "wandb_offline"
SECRET = "SECRET-hunter2-must-not-appear"


def deepspeed_run(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    write_metrics(run)
    shutil.copytree(LAYOUTS / "deepspeed_zero2_bf16" / "global_step2", run / "global_step2")
    return run


def case_texts(out: Path) -> str:
    return "".join((out / name).read_text() for name in ("case.json", "case.md", "case.html"))


def test_a_latest_linked_to_a_secret_is_not_read_nor_quoted(tmp_path):
    secret = tmp_path / "id_rsa"
    secret.write_text(SECRET + "\n")
    run = deepspeed_run(tmp_path)
    (run / "latest").symlink_to(secret)
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out, cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert SECRET not in case_texts(out) + outcome.stdout + outcome.stderr


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="FIFOs are a POSIX feature")
def test_a_fifo_named_latest_does_not_block_the_analysis(tmp_path):
    run = deepspeed_run(tmp_path)
    os.mkfifo(run / "latest")
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out, cwd=tmp_path, timeout=90)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]


def test_a_regular_latest_naming_another_tag_is_still_quoted(tmp_path):
    run = deepspeed_run(tmp_path)
    (run / "latest").write_text("global_step7\n")
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out, cwd=tmp_path)
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert "names global_step7" in (out / "case.json").read_text()


def optimizer_columns_read(out: Path) -> int:
    """How many layer rows carry Adam moments (read from the optimizer files)."""
    layers = pd.read_parquet(out / "layers.parquet")
    return int(layers["exp_avg_norm"].notna().sum())


def test_a_linked_dcp_optimizer_folder_is_not_read_through_the_link(tmp_path):
    run = tmp_path / "run"
    write_metrics(run)
    shutil.copytree(LAYOUTS / "dcp_accelerate" / "checkpoint-2", run / "checkpoint-2")
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (run / "checkpoint-2" / "optimizer_0").rename(elsewhere / "optimizer_0")
    (run / "checkpoint-2" / "optimizer_0").symlink_to(elsewhere / "optimizer_0")
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out, cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert optimizer_columns_read(out) == 0  # 9 of 9 rows before: the moments came from outside
    problems = [p["problem"] for p in json.loads((out / "case.json").read_text())["partial"]]
    assert any("symbolic link" in problem for problem in problems)


def test_a_linked_deepspeed_universal_zero_folder_is_not_read_through_the_link(tmp_path):
    run = tmp_path / "run"
    write_metrics(run)
    tag = run / "global_step2_universal"
    shutil.copytree(LAYOUTS / "deepspeed_zero2_bf16" / "global_step2_universal", tag)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tag / "zero").rename(elsewhere / "zero")
    (tag / "zero").symlink_to(elsewhere / "zero")
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out, cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert optimizer_columns_read(out) == 0  # 9 of 9 rows before


def test_a_linked_wandb_files_folder_lends_no_config_to_the_case(tmp_path):
    run_dir = tmp_path / "run" / "wandb" / "run-x"
    shutil.copytree(WANDB_FIXTURE, run_dir)
    shutil.rmtree(run_dir / "files", ignore_errors=True)
    elsewhere = tmp_path / "elsewhere" / "files"
    elsewhere.mkdir(parents=True)
    (elsewhere / "config.yaml").write_text(f"zz_setting:\n  value: {SECRET}\n")
    (run_dir / "files").symlink_to(elsewhere)
    out = tmp_path / "out"
    outcome = run_tscope("analyze", tmp_path / "run", "--out", out, cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert SECRET not in case_texts(out)  # it was in case.json, .md and .html
