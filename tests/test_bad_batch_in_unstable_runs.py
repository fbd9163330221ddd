"""A one-step loss break in a run whose gradient norm blows up again and again is the run's
instability, not one bad batch (analyzers/explainers/bad_batch_logs.py, UNSTABLE_BLOWUPS).
Planted-cause hunt, session 26: Adam β2 = 0.6 broke the loss 12× at one step among gradient
blow-ups of 100-1,600× at four other steps, and was "most likely a bad batch (0.98)"."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from tscope.pipeline import analyze_run

BREAK = 260


def _log(folder: Path, other_blowups: tuple[int, ...]) -> Path:
    rng = np.random.default_rng(7)
    rows = []
    for step in range(1, 401):
        loss = 2.5 + 3.0 * np.exp(-step / 60) + 0.03 * rng.standard_normal()
        grad = 0.5 * (1 + 0.1 * rng.standard_normal())
        if step == BREAK:
            loss, grad = loss * 5, grad * 300
        elif step in other_blowups:
            loss, grad = loss * 1.3, grad * 100
        rows.append({"step": step, "loss": loss, "grad_norm": grad, "lr": 1e-3})
    with open(folder / "metrics.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    return folder


def _bad_batches(folder: Path) -> list[int | None]:
    case, _ = analyze_run(str(folder))
    return [f.step for f in case.findings if f.category == "bad_batch"]


def test_a_break_among_recurring_gradient_blowups_is_not_a_bad_batch(tmp_path: Path) -> None:
    assert _bad_batches(_log(tmp_path, other_blowups=(150, 230, 300, 360))) == []


def test_the_same_break_alone_is_a_bad_batch(tmp_path: Path) -> None:
    assert _bad_batches(_log(tmp_path, other_blowups=())) == [BREAK]
