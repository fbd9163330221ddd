"""Red team round 6: a W&B log of millions of tiny config or summary records, each a new key.

A 61 MB `.wandb` of 2,500,000 one-key summary (or config) records took 1.2 GB and 62 s to
analyze, 0.9 GB and 29 s to read: every record was kept until the end, then merged into a
2.5-million-key summary that went on into the case. Per-record field counts were capped, not the
number of records. Config and summary keys are now capped (wandb_records.MAX_CONFIG_KEYS,
MAX_SUMMARY_KEYS), updates past the cap are counted, not kept, and the file is listed partial in
one line; the history is read in full. The crafted logs here are small (50,000 records), with
the caps lowered where a test needs to cross them cheaply.
"""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path

import pytest
from test_reader_wandb import config_record, field, frame, history_record

from tscope.ingest.readers import wandb_records
from tscope.ingest.readers.wandb_offline import WandbOfflineReader
from tscope.model import LogRead

SUMMARY, CONFIG = 3, 5  # wandb_internal.Record fields
ROWS = 200
CRAFTED = 50_000


def _one_key_record(record_field: int, index: int) -> bytes:
    """A Summary/ConfigRecord{update{key: "k<index>", value_json: "1"}}: ~20 bytes of file."""
    return field(record_field, field(1, field(1, b"k%06d" % index) + field(16, b"1")))


def _loss_rows(count: int) -> list[bytes]:
    return [history_record(step, {"loss": str(3.0 - step / 1000)}) for step in range(count)]


def _crafted_log(tmp_path: Path, record_field: int, count: int = CRAFTED) -> Path:
    """The run's own rows and settings, then `count` one-key records interleaved with more rows,
    then a last update of a key the run set first (it must still win)."""
    rows = _loss_rows(ROWS)
    crafted = [_one_key_record(record_field, index) for index in range(count)]
    half = ROWS // 2
    last = field(record_field, field(1, field(1, b"lr") + field(16, b"0.5")))
    first = field(record_field, field(1, field(1, b"lr") + field(16, b"0.1")))
    path = tmp_path / "run-x.wandb"
    path.write_bytes(frame([first, *rows[:half], *crafted, *rows[half:], last]))
    return path


def _read(path: Path) -> LogRead:
    return WandbOfflineReader().read(path, path.name)


def _key_notes(read: LogRead) -> list[str]:
    return [note.problem for note in read.partial if "under keys beyond" in note.problem]


def test_summary_keys_are_bounded_listed_partial_and_the_history_read(tmp_path: Path) -> None:
    """At the real cap: 50,000 summary keys were all kept and went into the case's config."""
    path = _crafted_log(tmp_path, SUMMARY)
    read = _read(path)
    summary = read.config["wandb_summary"]
    assert len(summary) <= 10_000, len(summary)  # W&B advises under 10,000 metrics a project
    assert len(summary) == wandb_records.MAX_SUMMARY_KEYS
    assert summary["lr"] == 0.5  # a kept key's last update wins, even past the cap
    assert "k000000" in summary and f"k{CRAFTED - 1:06d}" not in summary  # the first kept
    assert read.metrics["step"].tolist() == list(range(ROWS))
    notes = [note for note in read.partial if "under keys beyond" in note.problem]
    assert [note.path for note in notes] == [path.name]
    (problem,) = (note.problem for note in notes)
    dropped = CRAFTED + 1 - wandb_records.MAX_SUMMARY_KEYS
    assert problem.startswith(f"{dropped:,} summary update(s) under keys beyond"), problem
    assert "\n" not in problem


def test_config_keys_are_bounded_and_listed_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wandb_records, "MAX_CONFIG_KEYS", 100, raising=False)
    path = _crafted_log(tmp_path, CONFIG, 5000)
    read = _read(path)
    assert len(read.config) == 100  # lr and the first 99 crafted keys
    assert read.config["lr"] == 0.5 and "k000098" in read.config and "k000099" not in read.config
    assert read.metrics["step"].tolist() == list(range(ROWS))
    notes = _key_notes(read)
    assert notes == [notes[0]] and notes[0].startswith("4,901 config update(s)"), notes


def test_config_and_summary_past_their_caps_make_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(wandb_records, "MAX_CONFIG_KEYS", 10, raising=False)
    monkeypatch.setattr(wandb_records, "MAX_SUMMARY_KEYS", 20, raising=False)
    payloads = [
        config_record({f"c{i}": "1" for i in range(15)}),
        *[_one_key_record(SUMMARY, index) for index in range(50)],
        *_loss_rows(10),
    ]
    path = tmp_path / "run-x.wandb"
    path.write_bytes(frame(payloads))
    read = _read(path)
    assert read.metrics["step"].tolist() == list(range(10))
    notes = [note for note in read.partial if "under keys beyond" in note.problem]
    assert len(notes) == 1 and notes[0].path == path.name
    assert notes[0].problem.startswith(
        "5 config update(s) and 30 summary update(s) under keys beyond the first 10 config keys "
        "and 20 summary keys not read"
    ), notes[0].problem


def test_updates_past_the_cap_keep_no_object_a_record(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every record was kept to be merged at the end (~60 bytes of memory for ~20 of file); past
    the cap an update is now a count. Measured on the run log alone, the records built first."""
    monkeypatch.setattr(wandb_records, "MAX_SUMMARY_KEYS", 100, raising=False)
    monkeypatch.setattr(wandb_records, "MAX_CONFIG_KEYS", 100, raising=False)
    records = [
        _one_key_record(kind, index) for kind in (SUMMARY, CONFIG) for index in range(25_000)
    ]
    tracemalloc.start()
    try:
        log = wandb_records.RunLog()
        for record in records:
            log.add_record(record)
        held = tracemalloc.get_traced_memory()[0]
    finally:
        tracemalloc.stop()
    assert held < 200_000, held  # two caps' worth of keys; each of 50,000 records was ~70 bytes
    log.settle()
    assert len(log.summary) == 100 and len(log.config) == 100


def test_a_log_of_tiny_history_rows_each_a_new_key_is_read_as_it_is_split(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The history path of the same shape: each row a new metric name. The names are bounded by
    MAX_HISTORY_KEYS (counted past it) and every row under a kept key is read; the payloads are
    decoded as they are split out of the framing, not listed first (a bytes object a record took
    2.5 times a log of tiny records: 3.7x the file at peak, now 1.5x, the file itself included)."""
    monkeypatch.setattr(wandb_records, "MAX_HISTORY_KEYS", 100)
    rows = _loss_rows(ROWS) + [history_record(ROWS + i, {f"m{i}": "1"}) for i in range(20_000)]
    path = tmp_path / "run-x.wandb"
    path.write_bytes(frame(rows))
    tracemalloc.start()
    try:
        read = _read(path)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 2 * path.stat().st_size, (peak, path.stat().st_size)
    loss = read.metrics[read.metrics["original_name"] == "loss"]
    assert loss["step"].tolist() == list(range(ROWS))
    assert len(set(read.metrics["original_name"])) == 100  # loss and the first 99 names
    notes = [note.problem for note in read.partial]
    assert any(note.startswith("19901 history item(s) under keys beyond") for note in notes), notes


def test_the_sibling_summary_and_config_files_are_held_to_the_same_caps(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """files/wandb-summary.json (up to 16 MB: a million tiny keys) and files/config.yaml are
    merged over the log's keys; a new key past the cap is counted in the same line."""
    monkeypatch.setattr(wandb_records, "MAX_CONFIG_KEYS", 10, raising=False)
    monkeypatch.setattr(wandb_records, "MAX_SUMMARY_KEYS", 20, raising=False)
    files = tmp_path / "files"
    files.mkdir()
    summary = {"loss": 0.25, **{f"s{i}": i for i in range(100)}}
    (files / "wandb-summary.json").write_text(json.dumps(summary))
    (files / "config.yaml").write_text("".join(f"c{i}:\n  value: {i}\n" for i in range(30)))
    payloads = [_one_key_record(SUMMARY, 0), *_loss_rows(10)]
    path = tmp_path / "run-x.wandb"
    path.write_bytes(frame(payloads))
    read = _read(path)
    assert len(read.config["wandb_summary"]) == 20 and read.config["wandb_summary"]["loss"] == 0.25
    assert len(read.config) == 10 + 1  # the summary goes in as one more key
    assert read.metrics["step"].tolist() == list(range(10))
    assert _key_notes(read) == [
        "20 config update(s) and 82 summary update(s) under keys beyond the first 10 config keys "
        "and 20 summary keys not read (real runs hold a few thousand settings and W&B advises "
        "under 10,000 metrics; the file is crafted or damaged); the history was read"
    ]
