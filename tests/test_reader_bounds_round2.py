"""Resource bounds of the log readers (red-team round 2, F5/F6), checked with the caps set low.

F5: memory grew with the file without a cap (a 500 MB JSON Lines line, a 10M-line nanoGPT log,
trainer_state.json rows of 1,000 keys). F6: every slice of the long-form table copied and checked
all of its labels, so 100,000 series names cost 10^8 steps before the series cap applied.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from text_log_helpers import megatron_record, write

from tscope.ingest import discover as discover_module
from tscope.ingest.discover import discover
from tscope.ingest.logs import csv_arrow, table_cells, tabular
from tscope.ingest.logs.series_cap import cap_series
from tscope.ingest.readers import megatron_log, nanogpt_log, trainer_state, trainer_stdout
from tscope.ingest.readers.megatron_log import MegatronLogReader
from tscope.ingest.readers.nanogpt_log import NanoGPTLogReader
from tscope.ingest.readers.trainer_state import TrainerStateReader
from tscope.ingest.readers.trainer_stdout import TrainerStdoutReader
from tscope.model import LogRead, MetricTable, TextColumn
from tscope.model import metric_rows as metric_rows_module
from tscope.model.metric_rows import MetricRows

# ---- F5: text logs read into compact arrays, at most MAX_POINTS_PER_FILE points ---------------


def _small_point_cap(monkeypatch: pytest.MonkeyPatch, limit: int) -> None:
    monkeypatch.setattr(metric_rows_module, "MAX_POINTS_PER_FILE", limit)


def test_nanogpt_log_stops_at_the_point_cap_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _small_point_cap(monkeypatch, 30)
    lines = "".join(f"iter {i}: loss 2.{i:04d}, time 10.00ms, mfu 1.00%\n" for i in range(1000))
    path = write(tmp_path, "train.log", lines)
    read = NanoGPTLogReader().read(path, "train.log")
    assert len(read.metrics) == 30  # 3 points a line: the first 10 lines, then no more reading
    assert int(read.metrics.step.max()) == 9
    assert any("only the first 30 points" in item.problem for item in read.partial)


def test_nanogpt_log_under_the_cap_is_whole_and_unchanged(tmp_path: Path) -> None:
    lines = "".join(f"iter {i}: loss 2.5, time 10.00ms, mfu 1.00%, lr 1e-4\n" for i in range(50))
    lines += "step 50: train loss 2.4, val loss 2.6\n"
    read = NanoGPTLogReader().read(write(tmp_path, "train.log", lines), "train.log")
    assert read.partial == []
    assert len(read.metrics) == 50 * 4 + 2
    assert read.metrics.metric.labels == (
        "train/loss",
        nanogpt_log.STEP_TIME_MS,
        nanogpt_log.MFU_PERCENT,
        "train/learning_rate",
        nanogpt_log.EVAL_TRAIN_LOSS,
        "eval/loss",
    )
    assert read.metrics.order.tolist() == list(range(202))


def test_megatron_log_stops_at_the_point_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _small_point_cap(monkeypatch, 12)
    text = "".join(megatron_record(step) + "\n" for step in range(1, 200))
    read = MegatronLogReader().read(write(tmp_path, "train.log", text), "train.log")
    assert len(read.metrics) == 12
    assert any("only the first 12 points" in item.problem for item in read.partial)
    assert isinstance(read.metrics.step, np.ndarray)
    assert megatron_log.MetricRows is MetricRows  # the shared, compact path


def test_trainer_stdout_stops_at_the_printed_row_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trainer_stdout, "MAX_PRINTED_ROWS", 5)
    text = "".join(
        f"{{'loss': 2.{i}, 'learning_rate': 1e-05, 'epoch': {i / 100}}}\n" for i in range(40)
    )
    read = TrainerStdoutReader().read(write(tmp_path, "train.log", text), "train.log")
    assert len(read.metrics) == 5 * 2
    assert any("first 5 printed rows" in item.problem for item in read.partial)


def test_metric_rows_hold_24_bytes_a_point_and_drop_absurd_steps() -> None:
    rows = MetricRows(limit=100)
    for step in range(10):
        rows.add(step, "train/loss", 1.5, "loss")
    rows.add(2**60, "train/loss", 1.5, "loss")
    assert len(rows) == 10
    assert rows.dropped_steps == 1
    table = rows.to_table("train.log")
    assert table.metric.labels == ("train/loss",)
    assert table.step.tolist() == list(range(10))
    assert any("beyond 2**53" in problem for problem in rows.problems())


def test_a_memory_error_in_a_reader_is_one_partial_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    write(tmp_path, "train.log", "iter 1: loss 2.5, time 10.00ms, mfu 1.00%\n")

    def exhausted(self: NanoGPTLogReader, path: Path, display_path: str) -> LogRead:
        raise MemoryError

    monkeypatch.setattr(NanoGPTLogReader, "read", exhausted)
    found = discover(tmp_path)
    assert found.reads == []
    assert [item.path for item in found.partial] == ["train.log"]
    assert "ran out of memory" in found.partial[0].problem
    assert discover_module.discover is discover


# ---- F5: JSON Lines, one line at most MAX_TABLE_LINE_BYTES ------------------------------------


def test_a_json_lines_line_over_the_cap_is_skipped_not_parsed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tabular, "MAX_TABLE_LINE_BYTES", 200)
    parsed: list[bytes] = []
    real_parse = tabular._parse_line

    def spy(line: bytes) -> object:
        parsed.append(line)
        return real_parse(line)

    monkeypatch.setattr(tabular, "_parse_line", spy)
    rows = [json.dumps({"step": i, "loss": 2.0 + i / 100}) for i in range(20)]
    rows.insert(10, json.dumps({"step": 99, "loss": 1.0, "blob": "x" * 5000}))
    path = write(tmp_path, "metrics.jsonl", "\n".join(rows) + "\n")
    table = tabular.read_table(path, "metrics.jsonl")
    assert table.n_rows == 20
    assert max(len(line) for line in parsed) <= 200  # the long line never left the file's bytes
    assert 99.0 not in table.values["step"].tolist()
    assert any("longer than" in problem for problem in table.problems)


def test_json_lines_with_only_long_lines_is_unreadable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(tabular, "MAX_TABLE_LINE_BYTES", 64)
    path = write(tmp_path, "metrics.jsonl", json.dumps({"step": 1, "x": "y" * 500}) + "\n")
    with pytest.raises(tabular.UnreadableInput, match="longer than"):
        tabular.read_table(path, "metrics.jsonl")


def test_a_csv_line_longer_than_arrows_block_costs_that_line_not_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # One 100 MB line in a 2,000-row metrics.csv made it "not a readable CSV" (Arrow: "straddling
    # object straddles two block boundaries"): nothing analyzed. Scaled down: a 1 MiB block.
    monkeypatch.setattr(csv_arrow, "CSV_BLOCK_BYTES", 1024 * 1024)
    monkeypatch.setattr(tabular, "MAX_TABLE_LINE_BYTES", 64 * 1024)
    rows = [f"{i},{2.0 + i / 1000}" for i in range(1, 2001)]
    rows.insert(1000, "1000.5," + "x" * (3 * 1024 * 1024))
    path = write(tmp_path, "metrics.csv", "step,loss\n" + "\n".join(rows) + "\n")
    table = tabular.read_table(path, "metrics.csv")
    assert table.n_rows == 2000
    assert 1000.5 not in table.values["step"].tolist()
    assert any("1 line(s) longer than" in problem for problem in table.problems)


def test_a_long_text_value_is_not_scanned_as_a_number() -> None:
    assert table_cells._json_number("1" * 1000) is None
    assert table_cells._json_number(" 2.5 ") == 2.5
    assert not table_cells._is_missing(" " * 1000)


# ---- F5: trainer_state.json: a smaller byte cap and MAX_KEYS_PER_ENTRY keys a row ---------------


def test_trainer_state_rows_read_at_most_the_key_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trainer_state, "MAX_KEYS_PER_ENTRY", 3)
    history = [{"step": i, "loss": 2.0, **{f"k{j}": 1.5 for j in range(50)}} for i in range(4)]
    history.append({"step": 4, "loss": 1.9, "grad_norm": 0.5})
    path = write(tmp_path, "trainer_state.json", json.dumps({"log_history": history}))
    read = TrainerStateReader().read(path, "trainer_state.json")
    assert len(read.metrics) == 4 * 3 + 2
    assert any("4 log_history row(s) hold more than 3" in p.problem for p in read.partial)


def test_trainer_state_byte_cap_is_below_what_the_parse_multiplies_into_gigabytes() -> None:
    # The parse holds ~7x the file: 512 MiB held 3.6 GB (killed); 256 MiB bounds it near 1.8 GB.
    assert trainer_state.MAX_TRAINER_STATE_BYTES <= 256 * 1024 * 1024


def test_trainer_state_stops_at_the_point_cap(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    _small_point_cap(monkeypatch, 10)
    history = [{"step": i, "loss": 2.0, "learning_rate": 1e-4} for i in range(100)]
    path = write(tmp_path, "trainer_state.json", json.dumps({"log_history": history}))
    read = TrainerStateReader().read(path, "trainer_state.json")
    assert len(read.metrics) == 10
    assert any("only the first 10 points" in p.problem for p in read.partial)


# ---- F6: slicing a table touches its rows, not all of its labels -------------------------------


class _CountingLabels(tuple[str, ...]):
    """A label tuple that counts full iterations over it (tuple(), set(), zip, comprehensions)."""

    iterations = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        type(self).iterations += 1
        return super().__iter__()


def _wide_table(series: int) -> MetricTable:
    codes = np.arange(series, dtype=np.intp)
    labels = _CountingLabels(f"m{i}" for i in range(series))
    column = TextColumn(codes, labels)
    column.labels = labels  # keep the counting tuple (the constructor made a plain one)
    return MetricTable(
        np.zeros(series, dtype=np.int64),
        column,
        np.ones(series),
        "f.csv",
        TextColumn.constant("x", series),
        np.arange(series, dtype=np.int64),
    )


def test_take_and_rows_between_do_not_walk_the_labels() -> None:
    table = _wide_table(5000)
    _CountingLabels.iterations = 0
    for index in range(0, 5000, 5):
        table.take(np.asarray([index + 1, index]))
        table.rows_between(index, index + 2)
    assert _CountingLabels.iterations == 0


def test_the_series_cap_drops_unused_labels_once() -> None:
    table = _wide_table(50)
    read = LogRead(kind="csv", path="f.csv", metrics=table)
    (capped,), caveats = cap_series([read], limit=10)
    assert len(capped.metrics.metric.labels) == 10  # not the 50 names of the file
    assert capped.metrics.metric.texts().tolist() == [f"m{i}" for i in range(10)]
    assert any(caveat.kind == "series_cap" for caveat in caveats)


def test_without_unused_labels_keeps_the_texts() -> None:
    column = TextColumn(np.asarray([3, 1, 3, 0]), ("a", "b", "c", "d"))
    compact = column.without_unused_labels()
    assert compact.labels == ("a", "b", "d")
    assert compact.texts().tolist() == column.texts().tolist()
