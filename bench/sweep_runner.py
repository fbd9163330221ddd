"""Training the robustness sweep's variants: one fresh child process per phase.

The child is the entry point, robustness_sweep.py, started with its internal `--phase` option; it
calls `child_phase`, which registers the variant in the fixture generator and trains that phase.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

from sweep_fixtures import make_trainer_runs, planted
from sweep_variants import Variant, build_variants

# The script each phase's child process runs (its `--phase` option calls `child_phase`).
ENTRY_SCRIPT = Path(__file__).resolve().with_name("robustness_sweep.py")


def child_phase(name: str, phase_index: int, record_path: str) -> None:
    """In a fresh interpreter whose working directory is the output root: one phase of a variant,
    trained by the fixture generator's own `run_phase`."""
    variant = build_variants()[name]
    make_trainer_runs.RUNS[name] = variant.spec
    make_trainer_runs.SEED = variant.seed
    make_trainer_runs.run_phase(name, phase_index, record_path)


def train(variant: Variant, root: Path) -> float:
    """Train every phase of `variant` into `root/<name>/`; returns the seconds it took."""
    run_dir = root / variant.name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    records = root / "_records"
    records.mkdir(exist_ok=True)
    done = root / f"{variant.name}.done"
    done.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    started = time.monotonic()
    for index, phase in enumerate(variant.spec.phases):
        if phase.resume_from_checkpoint is not None:
            for relative in variant.spec.planted.get("deleted_files", []):
                (run_dir / relative).unlink()
        record = records / f"{variant.name}-{phase.name}.json"
        command = [sys.executable, str(ENTRY_SCRIPT), "--phase"]
        completed = subprocess.run(
            [*command, variant.name, str(index), str(record)],
            cwd=root,
            env=env,
            check=False,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        expected = planted.CRASH_EXIT_CODE if phase.crash_after_step is not None else 0
        if completed.returncode != expected:
            print(completed.stdout[-5000:], file=sys.stderr)
            raise RuntimeError(
                f"{variant.name}/{phase.name}: child exited {completed.returncode}, not {expected}"
            )
    seconds = time.monotonic() - started
    done.write_text(f"{seconds:.1f}\n", encoding="utf-8")
    return seconds
