"""An LR printed to a few decimals moves in steps of one printed unit: rounding, not a schedule
jump. Composer's console logger prints every float as `f"{value:.4f}"` (composer/loggers/
console_logger.py, format_log_data_value), so a healthy cosine schedule near 2.4e-4 reads 0.0002,
..., 0.0003, ..., 0.0001: a new user's healthy run got a ×1.5 `lr_schedule_jump` warning. The
lines below are that logger's shape (`[epoch=E][batch=B/N]:` then `\\t Train <key>: <value>`)."""

from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from tscope.analyzers.explainers.learning_rate import lr_jumps, print_quantum
from tscope.pipeline import analyze_run

BATCHES, EVERY, JUMP_AT = 600, 10, 400


def _console_log(path: Path, jump: bool) -> Path:
    lines = ["******************************", "Config:", "num_nodes: 1", "*" * 30]
    # Batch noise drawn at random: a sinusoid sampled every 10 batches is near-periodic (7
    # points), which the repeated-data rule rightly reads as batches fed again in turn.
    noise = np.random.default_rng(0).normal(0.0, 0.02, BATCHES // EVERY)
    for batch in range(EVERY, BATCHES + 1, EVERY):
        lr = 2.4e-4 * 0.5 * (1 + math.cos(math.pi * batch / BATCHES)) + 1e-5
        if jump and batch >= JUMP_AT:
            lr *= 28
        loss = 2.2 + 7 * math.exp(-batch / 80) + noise[batch // EVERY - 1]
        if jump and batch >= JUMP_AT + EVERY:
            loss += 3.0
        lines += [
            f"[epoch=1][batch={batch}/{BATCHES}]:",
            f"\t Train loss/train/total: {loss:.4f}",
            f"\t Train lr-DecoupledAdamW/group0: {lr:.4f}",
            f"\t Train l2_norm/grad/global: {1.0 + 0.05 * math.cos(batch):.4f}",
            f"\t Train time/batch: {batch}",
        ]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def test_a_healthy_schedule_printed_to_four_decimals_has_no_jump(tmp_path: Path) -> None:
    case, run = analyze_run(_console_log(tmp_path / "train.log", jump=False))
    assert run.has("train/learning_rate")
    assert not [f for f in case.findings if f.category == "lr_schedule_jump"]
    assert case.summary.status == "healthy", case.summary.verdict


def test_a_real_jump_in_the_same_log_is_still_the_cause(tmp_path: Path) -> None:
    case, _ = analyze_run(_console_log(tmp_path / "train.log", jump=True))
    card = case.summary.card
    assert card is not None and card.cause.category == "lr_schedule_jump"


def test_round_values_that_never_move_by_one_unit_keep_their_jumps() -> None:
    # A constant 1e-4 raised to 3e-4 for three points: two units at a time, no rounding seen.
    lrs = np.array([1e-4] * 50 + [3e-4] * 3 + [1e-4] * 50)
    assert print_quantum(lrs) == 0.0
    assert [j.step for j in lr_jumps(np.arange(lrs.size), lrs)] == [50, 53]
    rounded = np.round(2.4e-4 * np.cos(np.linspace(0, 1.5, 100)) + 1e-5, 4)
    assert print_quantum(rounded) == 1e-4
    assert lr_jumps(np.arange(rounded.size), rounded) == []
