"""Trainer stdout with many distinct progress bars: memory bounded, the extra bars noted.

Each printed row used to copy every bar's position: 2,000 bar totals then 50,000 rows (a 1.4 MB
log) were 100 million dict entries, past the harness' 3 GB limit; now a few MB.
"""

from __future__ import annotations

from pathlib import Path

from hostile import run_tscope

from tscope.ingest.readers.progress_bars import MAX_PROGRESS_BARS
from tscope.ingest.readers.trainer_stdout import TrainerStdoutReader

ROW = "{'loss': 1.5, 'learning_rate': 0.001, 'epoch': 0.1}\n"


def _bars_then_rows(path: Path, totals: int, rows: int) -> Path:
    bars = "".join(f"|1/{total + 2} [\n" for total in range(totals))
    path.write_text(bars + ROW * rows)
    return path


def test_many_bar_totals_then_many_rows_stay_within_memory(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    _bars_then_rows(run / "train.log", totals=2_000, rows=50_000)
    outcome = run_tscope("analyze", run, "--out", tmp_path / "out")
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]


def test_bars_past_the_cap_are_noted_as_partial(tmp_path: Path):
    path = _bars_then_rows(tmp_path / "train.log", totals=MAX_PROGRESS_BARS + 50, rows=10)
    read = TrainerStdoutReader().read(path, "train.log")
    assert len(read.metrics) > 0
    notes = [note.problem for note in read.partial]
    assert any("50 progress-bar redraw(s) were not followed" in note for note in notes), notes


def test_steps_still_come_from_the_training_bar(tmp_path: Path):
    lines = []
    for step in range(1, 6):
        lines.append(f" {step * 10}%|#  | {step}/10 [00:01<00:09]\r" + ROW.strip())
        lines.append(f" {step * 10}%|#  | {step + 1}/10 [00:01<00:09]")
    path = tmp_path / "train.log"
    path.write_text("\n".join(lines) + "\n")
    read = TrainerStdoutReader().read(path, "train.log")
    assert sorted(set(read.metrics["step"].tolist())) == [2, 3, 4, 5, 6]
