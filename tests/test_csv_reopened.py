"""A CSV logger that reopens its file after a restart writes the header again: a resume where
the steps run on (tscope/ingest/readers/metrics_table.py `_reopened`)."""

from __future__ import annotations

from pathlib import Path

from test_reader_metrics_table import READER, write


def test_a_header_written_again_mid_file_is_a_resume(tmp_path: Path) -> None:
    # A loop that reopens its CSV after a restart writes the header again; the steps run on.
    # It was only "non-numeric cells skipped" (planted-cause hunt, session 26).
    header = "step,train/loss,train/lr"
    first = [f"{s},{3 - s / 100:.4f},0.001" for s in range(1, 201)]
    second = [f"{s},{3 - s / 100:.4f},0.001" for s in range(201, 301)]
    path = write(tmp_path, "metrics.csv", "\n".join([header, *first, header, *second]) + "\n")
    read = READER.read(path, "metrics.csv")
    assert [(e.kind, e.step) for e in read.events] == [("resume", 201)]
    assert read.partial == []


def test_a_header_written_again_where_the_steps_go_back_is_left_to_the_assembly(
    tmp_path: Path,
) -> None:
    header = "step,loss"
    rows = [f"{s},{3 - s / 100:.4f}" for s in range(1, 201)]
    again = [f"{s},{3 - s / 100:.4f}" for s in range(151, 301)]
    path = write(tmp_path, "metrics.csv", "\n".join([header, *rows, header, *again]) + "\n")
    assert READER.read(path, "metrics.csv").events == []
