"""Write a run's series the way users log them, so rule tests go through the real readers.

`write_log(directory, kind, series)` with `series` mapping the user's own names (`loss`,
`grad_norm`, `lr`, `eval_loss`) to arrays indexed from step 1; NaN entries are not logged (so an
eval series can be sparse). Kinds: `csv` and `jsonl` (a hand-written training loop),
`trainer_state` (Hugging Face Trainer's log_history), `tensorboard` (torch's SummaryWriter).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

LOG_KINDS = ("csv", "jsonl", "trainer_state", "tensorboard")
_TRAINER_NAMES = {"loss": "loss", "grad_norm": "grad_norm", "lr": "learning_rate"}
_TB_TAGS = {
    "loss": "train/loss",
    "grad_norm": "train/grad_norm",
    "lr": "train/learning_rate",
    "eval_loss": "eval/loss",
}


def _rows(series: dict[str, np.ndarray]) -> list[tuple[int, dict[str, float]]]:
    length = max(len(values) for values in series.values())
    rows = []
    for index in range(length):
        row = {
            name: float(values[index])
            for name, values in series.items()
            if index < len(values) and np.isfinite(values[index])
        }
        if row:
            rows.append((index + 1, row))
    return rows


def write_log(directory: Path, kind: str, series: dict[str, np.ndarray]) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    rows = _rows(series)
    if kind == "csv":
        names = list(series)
        lines = ["step," + ",".join(names)]
        for step, row in rows:
            lines.append(f"{step}," + ",".join(repr(row[n]) if n in row else "" for n in names))
        path = directory / "metrics.csv"
        path.write_text("\n".join(lines) + "\n")
        return path
    if kind == "jsonl":
        path = directory / "metrics.jsonl"
        path.write_text("".join(json.dumps({"step": step, **row}) + "\n" for step, row in rows))
        return path
    if kind == "trainer_state":
        history = []
        for step, row in rows:
            train = {_TRAINER_NAMES[n]: v for n, v in row.items() if n in _TRAINER_NAMES}
            if train:
                history.append({**train, "epoch": step / len(rows), "step": step})
            if "eval_loss" in row:
                history.append(
                    {"eval_loss": row["eval_loss"], "epoch": step / len(rows), "step": step}
                )
        state = {
            "global_step": rows[-1][0],
            "log_history": history,
            "logging_steps": 1,
            "max_steps": rows[-1][0],
        }
        path = directory / "trainer_state.json"
        path.write_text(json.dumps(state, indent=2, sort_keys=True))
        return path
    if kind == "tensorboard":
        from torch.utils.tensorboard import SummaryWriter

        writer = SummaryWriter(log_dir=str(directory))
        for step, row in rows:
            for name, value in row.items():
                writer.add_scalar(_TB_TAGS[name], value, step)
        writer.close()
        return directory
    raise ValueError(f"unknown log kind {kind!r}; valid: {', '.join(LOG_KINDS)}")
