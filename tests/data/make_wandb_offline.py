"""Regenerate tests/data/wandb_offline/ with the real wandb client (not a tscope dependency).

    python3 -m venv /tmp/wandbvenv && /tmp/wandbvenv/bin/pip install wandb
    /tmp/wandbvenv/bin/python tests/data/make_wandb_offline.py

Logs 200 steps of a smooth loss with a planted spike at step 120 and a NaN loss at step 150, a
grad norm that jumps two steps before the spike, a cosine learning rate, and an eval loss every
50 steps (sparse rows, as scan_history returns them). Only the run's .wandb log is kept, plus
files/config.yaml and files/wandb-summary.json when the client writes them (wandb 0.31 in offline
mode does not: config and summary live only in the log). Debug logs and metadata name the host
and user and are dropped. The run id is random, so the log's name changes on each run.
"""

from __future__ import annotations

import math
import os
import shutil
import tempfile
from pathlib import Path

import wandb

SPIKE_STEP = 120  # loss jumps to 3x its trend for one step
NAN_STEP = 150  # loss is logged as NaN
TOTAL_STEPS = 200
EVAL_EVERY = 50
TARGET = Path(__file__).resolve().parent / "wandb_offline"


def main() -> None:
    os.environ["WANDB_MODE"] = "offline"
    os.environ["WANDB_SILENT"] = "true"
    with tempfile.TemporaryDirectory() as scratch:
        run = wandb.init(
            project="tscope-fixture",
            dir=scratch,
            config={"learning_rate": 3e-4, "batch_size": 8, "model": {"layers": 2}},
            settings=wandb.Settings(
                console="off", x_disable_stats=True, x_disable_meta=True, disable_git=True
            ),
        )
        for step in range(TOTAL_STEPS):
            loss = 4.0 * math.exp(-step / 80) + 2.0
            grad_norm = 1.0
            if step == SPIKE_STEP:
                loss *= 3.0
            if step in (SPIKE_STEP - 2, SPIKE_STEP - 1, SPIKE_STEP):
                grad_norm = 25.0
            if step == NAN_STEP:
                loss = float("nan")
            lr = 3e-4 * 0.5 * (1 + math.cos(math.pi * step / TOTAL_STEPS))
            row = {"train/loss": loss, "train/grad_norm": grad_norm, "train/learning_rate": lr}
            if step % EVAL_EVERY == 0:
                row["eval/loss"] = loss + 0.1
            run.log(row, step=step)
        run.finish()
        run_dirs = sorted(Path(scratch, "wandb").glob("offline-run-*"))
        source = run_dirs[-1]
        if TARGET.exists():
            shutil.rmtree(TARGET)
        TARGET.mkdir(parents=True)
        for wandb_file in source.glob("run-*.wandb"):
            shutil.copy2(wandb_file, TARGET / wandb_file.name)
        for name in ("config.yaml", "wandb-summary.json"):
            if (source / "files" / name).exists():
                (TARGET / "files").mkdir(exist_ok=True)
                shutil.copy2(source / "files" / name, TARGET / "files" / name)


if __name__ == "__main__":
    main()
