"""llm.c's main.log (karpathy/llm.c llmc/logger.h: `s:%d trl:%.4f lr:%.6f norm:%.2f`,
`s:%d tel:%.4f`, `s:%d eval:%.4f`; the older train_gpt2.cu: `s:%d trl:%f`). A new user's llm.c
run directory was "No supported log or checkpoint (1 files of unknown format)"."""

from __future__ import annotations

import math
from pathlib import Path

from tscope.ingest.readers.llmc_log import HELLASWAG_ACCURACY, LlmcLogReader
from tscope.model.metric_names import EVAL_LOSS, GRAD_NORM, LEARNING_RATE, LOSS
from tscope.pipeline import analyze_run

STEPS, JUMP_AT = 400, 250


def _main_log(folder: Path, jump: bool = False, old: bool = False) -> Path:
    folder.mkdir(parents=True)
    lines = []
    for step in range(STEPS):
        lr = 6e-4 * min((step + 1) / 40, 1.0) * (0.5 + 0.5 * math.cos(math.pi * step / STEPS))
        if jump and step >= JUMP_AT:
            lr *= 20
        loss = 2.3 + 8 * math.exp(-step / 60) + 0.01 * math.sin(step)
        if jump and step >= JUMP_AT + 2:
            loss += 1.5
        if step % 100 == 0:
            lines.append(f"s:{step} tel:{loss + 0.05:.4f}")
            if not old:
                lines.append(f"s:{step} eval:{0.25 + step / 4000:.4f}")
        if old:
            lines.append(f"s:{step} trl:{loss:f}")
        else:
            lines.append(
                f"s:{step} trl:{loss:.4f} lr:{lr:.6f} norm:{1.0 + 0.1 * math.cos(step):.2f}"
            )
    log = folder / "main.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return log


def test_the_logger_records_become_the_runs_series(tmp_path: Path) -> None:
    log = _main_log(tmp_path / "log124M")
    assert LlmcLogReader().can_read(log)
    case, run = analyze_run(tmp_path)
    assert [s.kind for s in run.sources] == ["llmc_log"]
    steps, _ = run.series(LOSS)
    assert steps[0] == 0 and steps[-1] == STEPS - 1
    assert run.series(EVAL_LOSS)[0].tolist() == [0, 100, 200, 300]
    assert run.has(LEARNING_RATE) and run.has(GRAD_NORM)
    # HellaSwag accuracy is not a loss.
    assert run.series(HELLASWAG_ACCURACY)[0].size == 4
    assert case.summary.status == "healthy", case.summary.verdict


def test_an_lr_jump_is_the_cause(tmp_path: Path) -> None:
    _main_log(tmp_path / "log124M", jump=True)
    case, _ = analyze_run(tmp_path)
    card = case.summary.card
    assert card is not None and card.cause.category == "lr_schedule_jump"
    assert card.cause.finding_id is not None


def test_the_older_train_loss_only_format_is_read(tmp_path: Path) -> None:
    _main_log(tmp_path / "log", old=True)
    _, run = analyze_run(tmp_path)
    assert run.series(LOSS)[0].size == STEPS and not run.has(LEARNING_RATE)
