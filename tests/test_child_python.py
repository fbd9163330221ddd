"""The Python processes tscope starts never import code from the folder the user is in
(tscope/child_python.py): `cd STRANGERS_RUN && tscope …` is the most common use."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from tscope.cluster_pipeline import cluster

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "fixtures" / "data" / "sweep"
TSCOPE = Path(sys.executable).with_name("tscope")


def plant_package(folder: Path, name: str, marker: Path) -> None:
    """A package named like one a child imports first, which leaves a mark when it runs."""
    package = folder / name
    package.mkdir(parents=True)
    (package / "__init__.py").write_text(
        f"open({str(marker)!r}, 'a').write('ran')\nraise SystemExit(1)\n", encoding="utf-8"
    )


@pytest.mark.slow
def test_xray_of_a_two_process_run_imports_nothing_from_the_run_folder(tmp_path):
    # The attack as it was found: a Trainer run that says it used 2 processes makes xray start
    # `python -m torch.distributed.run`; started in the run folder, that imported its torch/.
    run = tmp_path / "run"
    run.mkdir()
    torch.save(
        {
            "per_device_train_batch_size": 2,
            "gradient_accumulation_steps": 1,
            "seed": 42,
            "distributed_state": {"num_processes": 2},
        },
        run / "training_args.bin",
    )
    marker = tmp_path / "ran.txt"
    plant_package(run, "torch", marker)
    done = subprocess.run(
        [str(TSCOPE), "xray", ".", "--out", str(tmp_path / "out"), "--quiet"],
        cwd=run,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert not marker.exists(), done.stderr
    assert "Traceback" not in done.stderr


def test_spawned_cluster_workers_import_nothing_from_the_working_folder(tmp_path, monkeypatch):
    # torch is loaded in this process, so the pool spawns: `python -c …` would put the working
    # folder first on the import path, ahead of the standard library's multiprocessing.
    assert "torch" in sys.modules
    runs = tmp_path / "runs"
    for name in ("lr0.001_seed1234", "lr0.002_seed7"):
        (runs / name).mkdir(parents=True)
        shutil.copy2(SWEEP / name / "trainer_state.json", runs / name / "trainer_state.json")
    marker = tmp_path / "ran.txt"
    plant_package(runs, "multiprocessing", marker)
    monkeypatch.chdir(runs)
    monkeypatch.delenv("PYTHONSAFEPATH", raising=False)
    report = cluster(Path("."), tmp_path / "out", jobs=2)
    assert not marker.exists()
    assert {p.name for p in report.profiles} == {"lr0.001_seed1234", "lr0.002_seed7"}
    assert "PYTHONSAFEPATH" not in os.environ  # restored: the caller's own scripts keep their path
