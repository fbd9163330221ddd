"""A per-step log beside its run's epoch summary (Keras' CSVLogger layout: `epoch,loss,...` one
row per epoch) is one run: a blind set's Keras-like loop writing batch_log.csv and history.csv
(session 29) was refused as "2 separate runs". The per-step log is read; the epoch table, whose
epochs cannot share the step axis, is named as set aside."""

from __future__ import annotations

import math
from pathlib import Path

import tscope
from tscope.ingest.run_groups import EPOCH_SUMMARY_SET_ASIDE


def _run(folder: Path, with_steps: bool = True) -> Path:
    folder.mkdir()
    if with_steps:
        rows = [
            f"{s},{s // 50},{s % 50},{2.5 + 3 * math.exp(-s / 60):.5f},1e-3" for s in range(1, 301)
        ]
        (folder / "batch_log.csv").write_text("step,epoch,batch,loss,lr\n" + "\n".join(rows) + "\n")
    epochs = [
        f"{e},{2.5 + 3 * math.exp(-50 * e / 60):.5f},1e-3,{2.6 + 3 * math.exp(-50 * e / 60):.5f}"
        for e in range(6)
    ]
    (folder / "history.csv").write_text("epoch,loss,lr,val_loss\n" + "\n".join(epochs) + "\n")
    return folder


def test_the_epoch_summary_beside_a_step_log_is_set_aside(tmp_path: Path) -> None:
    case = tscope.analyze(_run(tmp_path / "run"))
    aside = EPOCH_SUMMARY_SET_ASIDE.format(step_log="batch_log.csv")
    assert [(p.path, p.problem) for p in case.partial] == [("history.csv", aside)]
    assert case.run.last_step == 300


def test_an_epoch_table_alone_is_still_read(tmp_path: Path) -> None:
    case = tscope.analyze(_run(tmp_path / "run", with_steps=False))
    assert case.partial == []
