"""lr_too_high from the configuration agrees with the curve when the loss stalled early, not only
when it blew up: a blind set's nanoGPT run at 0.3 (session 30) printed the LR only in its config
echo, spiked in its warm-up and sat at the unigram level for the whole run, read as healthy with
an informational note. Written as nanoGPT's train.py prints its stdout."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from tscope.pipeline import analyze_run


def _nanogpt_log(folder: Path, learning_rate: float, stalled: bool) -> None:
    rng = np.random.default_rng(7)
    lines = [
        "Overriding config with config/train_char.py:",
        "out_dir = 'out'",
        "log_interval = 2",
        "n_layer = 2",
        f"learning_rate = {learning_rate}",
        "max_iters = 240",
        "warmup_iters = 10",
        "found vocab_size = 96 (inside data/char/meta.pkl)",
        "Initializing a new model from scratch",
        "step 0: train loss 4.5818, val loss 4.5781",
    ]
    for it in range(0, 241, 2):
        if stalled:
            loss = (
                4.58 if it == 0 else 3.35 + 1.2 * math.exp(-it / 6) + 0.08 * rng.standard_normal()
            )
        else:
            loss = 2.2 + 2.4 * math.exp(-it / 60) + 0.03 * rng.standard_normal()
        lines.append(f"iter {it}: loss {loss:.4f}, time 20.00ms, mfu 4.40%")
    (folder / "train.log").write_text("\n".join(lines) + "\n")
    # The vocabulary as a fork's config.json gives it (nanoGPT's ckpt.pt gives it too, through
    # the rows of its token embedding).
    (folder / "config.json").write_text(json.dumps({"vocab_size": 96}))


def _lr_too_high(folder: Path) -> list[tuple[str, str]]:
    case, _ = analyze_run(str(folder))
    return [(f.severity, f.message) for f in case.findings if f.category == "lr_too_high"]


def test_a_far_too_high_configured_lr_whose_loss_stalls_is_a_warning(tmp_path: Path) -> None:
    _nanogpt_log(tmp_path, 0.3, stalled=True)
    found = _lr_too_high(tmp_path)
    assert [severity for severity, _ in found] == ["warning"], found
    assert "then stalled" in found[0][1]


def test_the_same_lr_with_a_loss_that_keeps_falling_stays_context(tmp_path: Path) -> None:
    _nanogpt_log(tmp_path, 0.3, stalled=False)
    assert [severity for severity, _ in _lr_too_high(tmp_path)] == ["info"]


def test_a_typical_lr_that_stalls_is_not_blamed_on_the_lr(tmp_path: Path) -> None:
    _nanogpt_log(tmp_path, 1e-3, stalled=True)
    assert _lr_too_high(tmp_path) == []


def _rising_lr_log(folder: Path, stalled: bool) -> None:
    """A plain loop's metrics.jsonl whose LR climbs linearly for the whole run to 0.12."""
    rng = np.random.default_rng(11)
    rows = []
    for step in range(1, 301):
        if stalled:
            loss = 2.9 + 2.1 * math.exp(-step / 8) + 0.05 * rng.standard_normal()
        else:
            loss = 1.6 + 3.4 * math.exp(-step / 90) + 0.03 * rng.standard_normal()
        rows.append({"step": step, "loss": loss, "lr": 4e-4 * step})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "config.json").write_text(json.dumps({"vocab_size": 256}))


def test_an_lr_that_rises_through_the_whole_log_past_the_range_and_stalls_warns(
    tmp_path: Path,
) -> None:
    # Two blind sets' runs (hN run10, hP run10) climbed linearly for the whole run to 13x and
    # 30x their intended peak: no peak for the ramp and stall rules to read.
    _rising_lr_log(tmp_path, stalled=True)
    found = _lr_too_high(tmp_path)
    assert [severity for severity, _ in found] == ["warning"], found
    assert "a log it rose through" in found[0][1]


def test_the_same_rising_lr_with_a_loss_that_keeps_falling_stays_context(tmp_path: Path) -> None:
    _rising_lr_log(tmp_path, stalled=False)
    assert [severity for severity, _ in _lr_too_high(tmp_path)] == ["info"]
