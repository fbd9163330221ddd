"""warmup_too_short (stalled) measures the first drop from a fresh model's level ln(vocab) when
the first logged loss came after a hot update had already taken most of it (a blind set's
Lightning run at 0.05 with no warm-up, session 30: 3.83 logged at step 1, ln 256 = 5.55)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.warmup_stall import WarmupStallExplainer, _start_level
from tscope.pipeline import analyze_run


def _hot_start_run(folder: Path, vocab: int | None) -> None:
    rng = np.random.default_rng(3)
    rows = []
    for index, step in enumerate(range(1, 260, 2)):
        if index == 0:
            loss = 3.83
        elif index == 1:
            loss = 6.5
        else:
            loss = 3.1 + 2.0 * math.exp(-index / 2) + 0.08 * rng.standard_normal()
        lr = 0.005 + 0.045 * 0.5 * (1 + math.cos(math.pi * step / 260))
        rows.append({"step": step, "loss": loss, "lr": lr})
    (folder / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    if vocab is not None:
        (folder / "config.json").write_text(json.dumps({"vocab_size": vocab}))


def _stall(folder: Path) -> list[str]:
    case, _ = analyze_run(str(folder))
    return [f.message for f in case.findings if f.category == "warmup_too_short"]


def test_a_hot_start_logged_after_its_drop_is_measured_from_ln_vocab(tmp_path: Path) -> None:
    _hot_start_run(tmp_path, 256)
    messages = _stall(tmp_path)
    assert messages and "ln 256 = 5.55" in messages[0], messages


def test_without_a_vocabulary_the_first_logged_loss_is_the_start(tmp_path: Path) -> None:
    _hot_start_run(tmp_path, None)
    assert _stall(tmp_path) == []  # 3.83 -> ~3.1 is under EARLY_DROP_FRACTION


def test_a_pretrained_start_keeps_its_logged_level(tmp_path: Path) -> None:
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 50257}))
    (tmp_path / "metrics.jsonl").write_text(json.dumps({"step": 1, "loss": 2.0}) + "\n")
    _, run = analyze_run(str(tmp_path))
    evidence = Evidence(run=run, spikes=[], checkpoints=None)
    assert _start_level(evidence, 2.0)[0] == 2.0  # under half of ln 50257: a pretrained model
    assert _start_level(evidence, 11.0)[0] == 11.0  # above ln V = 10.82: as logged
    assert math.isclose(_start_level(evidence, 6.0)[0], math.log(50257))
    assert WarmupStallExplainer().run(evidence) == []
