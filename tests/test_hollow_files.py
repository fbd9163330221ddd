"""A large file that stores far less than its length (sparse) is named and left out
(tscope/ingest/safe_fs.py `is_hollow`): memory and time follow what a file holds. Red team: a
16 KB safetensors file claiming a 1.1 TB tensor was scanned for an hour; a 5 KB JSONL claiming
4 GB took 4.25 GB of memory."""

from __future__ import annotations

import json
import os
import struct
from pathlib import Path

import pytest

from tscope.errors import UnreadableInput
from tscope.ingest.inputs import ReadOptions, read_inputs
from tscope.ingest.safe_fs import HOLLOW_FROM_BYTES, read_bytes_bounded

CLAIMED = 4 * HOLLOW_FROM_BYTES


def hollow(path: Path, head: bytes, length: int = CLAIMED) -> Path:
    path.write_bytes(head)
    os.truncate(path, length)
    if os.stat(path).st_blocks * 512 >= length // 64:
        pytest.skip("this file system stores no holes")
    return path


def loss_csv(folder: Path) -> None:
    rows = "\n".join(f"{step},{3.0 - step / 100}" for step in range(1, 101))
    (folder / "metrics.csv").write_text(f"step,loss\n{rows}\n", encoding="utf-8")


def test_a_sparse_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    path = hollow(tmp_path / "metrics.jsonl", b'{"step": 1, "loss": 2.0}\n')
    with pytest.raises(UnreadableInput) as refused:
        read_bytes_bounded(path, "metrics.jsonl")
    assert f"{CLAIMED:,} bytes long but only" in refused.value.problem
    assert "sparse" in refused.value.problem


def test_a_dense_file_of_the_same_length_is_read(tmp_path: Path) -> None:
    path = tmp_path / "dense.bin"
    path.write_bytes(b"\x01" * (HOLLOW_FROM_BYTES + 1))
    assert len(read_bytes_bounded(path, "dense.bin")) == HOLLOW_FROM_BYTES + 1


def test_a_sparse_log_beside_a_real_one_is_named_and_the_rest_analyzed(tmp_path: Path) -> None:
    loss_csv(tmp_path)
    hollow(tmp_path / "other.jsonl", b'{"step": 1, "loss": 2.0}\n')
    inputs = read_inputs([tmp_path], ReadOptions())
    problems = {item.path: item.problem for item in inputs.run.partial}
    assert "sparse file" in problems["other.jsonl"]
    assert inputs.run.metric_names


def test_a_sparse_safetensors_checkpoint_is_left_out(tmp_path: Path) -> None:
    loss_csv(tmp_path)
    checkpoint = tmp_path / "checkpoint-10"
    checkpoint.mkdir()
    count = (CLAIMED - 4096) // 4
    header = json.dumps(
        {"w": {"dtype": "F32", "shape": [count], "data_offsets": [0, count * 4]}}
    ).encode()
    header += b" " * (-len(header) % 8)
    hollow(
        checkpoint / "model.safetensors",
        struct.pack("<Q", len(header)) + header,
        8 + len(header) + count * 4,
    )
    inputs = read_inputs([tmp_path], ReadOptions())
    problems = {item.path: item.problem for item in inputs.run.partial}
    assert any("sparse file" in problem for problem in problems.values()), problems
