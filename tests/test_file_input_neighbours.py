"""A file named alone is the whole input: readers that look beside the file they read (a W&B
offline run's files/ folder, a trainscope recording's meta.json and layer files) do not read its
neighbours then (red-team round 2: readers stepping above the input). Named through its folder,
the same run reads them as before."""

from __future__ import annotations

import shutil
from pathlib import Path

import tscope
from tscope.ingest.discover import discover

ROOT = Path(__file__).resolve().parents[1]
WANDB_RUN = ROOT / "tests" / "data" / "wandb_offline" / "run-c1kgp2xt.wandb"
TRAINSCOPE_RUN = ROOT / "fixtures" / "data" / "trainscope" / "healthy"


def _wandb_run_with_config(tmp_path: Path) -> Path:
    run = tmp_path / "run"
    (run / "files").mkdir(parents=True)
    shutil.copy2(WANDB_RUN, run / WANDB_RUN.name)
    (run / "files" / "config.yaml").write_text("lr:\n  value: 0.0123\n")
    return run


def test_a_wandb_file_named_alone_does_not_read_the_files_folder_beside_it(
    tmp_path: Path,
) -> None:
    run = _wandb_run_with_config(tmp_path)
    (alone,) = discover(run / WANDB_RUN.name).reads
    assert "lr" not in alone.config or alone.config["lr"] != 0.0123
    assert any("files/ folder beside it" in p.problem for p in alone.partial)
    (whole,) = discover(run).reads
    assert whole.config["lr"] == 0.0123
    assert not any("files/ folder beside it" in p.problem for p in whole.partial)


def test_a_trainscope_global_arrow_named_alone_lends_nothing_from_its_folder(
    tmp_path: Path,
) -> None:
    run = tmp_path / "healthy"
    shutil.copytree(TRAINSCOPE_RUN, run)
    alone = discover(run / "global.arrow")
    assert alone.reads == [] and alone.unclaimed == ["global.arrow"]
    whole = tscope.analyze(run)
    assert whole.summary.status in ("healthy", "incident")
