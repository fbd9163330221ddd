"""Crafted Arrow IPC files in a trainscope recording (`global.arrow`, `layers/`, `moe.arrow`).

pyarrow and pandas build what an IPC message declares: a compressed body, a run-end-encoded
column, a list view or the pandas metadata of the schema can make a few bytes stand for
gigabytes or end in a traceback (tscope/ingest/readers/arrow_ipc.py). Each test builds its
recording in tmp_path and runs the real CLI under the hostile harness's memory limit.
"""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.ipc as ipc
import pytest

from tests.hostile import run_tscope
from tscope.ingest.readers import trainscope_run
from tscope.ingest.readers.trainscope_run import TrainscopeRunReader

ROWS = 120


def _arrow(table: pa.Table, *, file_format: bool = False, compression: str | None = None) -> bytes:
    sink = io.BytesIO()
    options = ipc.IpcWriteOptions(compression=compression)
    opener = ipc.new_file if file_format else ipc.new_stream
    with opener(sink, table.schema, options=options) as writer:
        writer.write_table(table)
    return sink.getvalue()


def _global_table() -> pa.Table:
    loss = np.linspace(3.0, 1.0, ROWS)
    loss[80:84] += 6.0
    return pa.table({"step": np.arange(ROWS), "loss": loss, "lr": np.full(ROWS, 1e-3)})


def _recording(root: Path, global_arrow: bytes, **others: bytes) -> Path:
    """A trainscope recording: meta.json, global.arrow and the other files named (a `__` in a
    name is a folder separator: layers__w.arrow is layers/w.arrow)."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "meta.json").write_text(json.dumps({"model_name": "tiny"}))
    (root / "global.arrow").write_bytes(global_arrow)
    for name, data in others.items():
        path = root / name.replace("__", "/")
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return root


def _partial(out: Path) -> list[dict[str, Any]]:
    partial: list[dict[str, Any]] = json.loads((out / "case.json").read_text())["partial"]
    return partial


@pytest.mark.parametrize("file_format", [False, True], ids=["stream", "file"])
def test_a_compressed_global_arrow_bomb_is_refused_before_it_expands(
    tmp_path: Path, file_format: bool
) -> None:
    # 2M zero steps and losses: 32 MB once decompressed, a few KB of zstd on disk. 50M rows
    # (24 KB) once ran the analysis out of memory while pyarrow decompressed them.
    zeros = pa.table({"step": np.zeros(2_000_000, np.int64), "loss": np.zeros(2_000_000)})
    bomb = _arrow(zeros, file_format=file_format, compression="zstd")
    assert len(bomb) < 100_000
    run = _recording(tmp_path / "run", bomb)
    outcome = run_tscope("analyze", run, "--out", tmp_path / "out")
    outcome.assert_one_line_error("global.arrow", "decompression bomb")


def test_a_compressed_layer_bomb_is_left_out_and_the_rest_analyzed(tmp_path: Path) -> None:
    zeros = pa.table({"step": np.zeros(2_000_000, np.int64), "grad_l2_norm": np.zeros(2_000_000)})
    layer = pa.table({"step": np.arange(ROWS), "grad_l2_norm": np.ones(ROWS)})
    run = _recording(
        tmp_path / "run",
        _arrow(_global_table()),
        **{
            "layers__bomb.arrow": _arrow(zeros, compression="zstd"),
            "layers__fine.arrow": _arrow(layer, compression="lz4"),  # compressed, and fine
        },
    )
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr
    problems = {p["path"]: p["problem"] for p in _partial(out)}
    assert "decompression bomb" in problems["layers/bomb.arrow"], problems
    assert not any(path.endswith("fine") for path in problems), problems


def test_run_end_encoded_steps_are_refused_in_one_line(tmp_path: Path) -> None:
    # 768 bytes that pandas expands to 2**28 steps and losses (the process was killed for memory).
    many = 2**28
    steps = pa.RunEndEncodedArray.from_arrays(pa.array([many], pa.int32()), pa.array([1]))
    loss = pa.RunEndEncodedArray.from_arrays(pa.array([many], pa.int32()), pa.array([1.0]))
    run = _recording(tmp_path / "run", _arrow(pa.table({"step": steps, "loss": loss})))
    outcome = run_tscope("analyze", run, "--out", tmp_path / "out")
    outcome.assert_one_line_error("global.arrow", "run_end_encoded")


def test_a_list_view_of_shares_is_left_out_of_the_routing_series(tmp_path: Path) -> None:
    # Every row views the same 100,000 shares: 0.8 MB on disk, 1.6 GB once pandas copies them.
    shares = pa.ListViewArray.from_arrays(
        pa.array([0] * 2000, pa.int32()), pa.array([100_000] * 2000, pa.int32()), np.zeros(100_000)
    )
    moe = pa.table({"step": np.arange(2000), "block": np.zeros(2000, np.int64), "shares": shares})
    run = _recording(tmp_path / "run", _arrow(_global_table()), **{"moe.arrow": _arrow(moe)})
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr
    problems = {p["path"]: p["problem"] for p in _partial(out)}
    assert "list_view" in problems["moe.arrow"], problems


@pytest.mark.parametrize(
    "pandas_metadata",
    [
        b"not json",
        b'{"index_columns": ["nowhere"], "columns": [], "column_indexes": []}',
        b'{"index_columns": [{"kind": "range", "name": null, "start": 0, "stop": 1e400, '
        b'"step": 0}], "columns": [], "column_indexes": []}',
    ],
    ids=["not-json", "missing-index", "infinite-range"],
)
def test_crafted_pandas_metadata_in_the_schema_is_ignored(
    tmp_path: Path, pandas_metadata: bytes
) -> None:
    table = _global_table().replace_schema_metadata({b"pandas": pandas_metadata})
    run = _recording(tmp_path / "run", _arrow(table))
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr
    assert "train/loss" in json.loads((out / "case.json").read_text())["metrics"]


def test_a_column_written_twice_is_refused_in_one_line(tmp_path: Path) -> None:
    table = pa.Table.from_arrays(
        [pa.array(np.arange(ROWS)), pa.array(np.ones(ROWS)), pa.array(np.ones(ROWS))],
        names=["step", "loss", "loss"],
    )
    run = _recording(tmp_path / "run", _arrow(table))
    outcome = run_tscope("analyze", run, "--out", tmp_path / "out")
    outcome.assert_one_line_error("global.arrow", "'loss' appears 2 times")


def test_expert_series_are_capped_and_the_cap_is_marked_partial(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 200 blocks of 100,000 experts (a few MB of zstd) once made 20 million series.
    monkeypatch.setattr(trainscope_run, "MAX_MOE_SERIES", 6)
    moe = pa.table(
        {
            "step": np.repeat(np.arange(ROWS), 2),
            "block": np.tile(np.array([0, 1]), ROWS),
            "shares": pa.array([[0.25] * 4] * (2 * ROWS), pa.list_(pa.float64())),
        }
    )
    run = _recording(tmp_path / "run", _arrow(_global_table()), **{"moe.arrow": _arrow(moe)})
    read = TrainscopeRunReader().read(run / "global.arrow", "global.arrow")
    assert read.metrics is not None
    routing = {name for name in read.metrics.metric.used_labels() if name.startswith("moe/")}
    assert len(routing) == 6, routing
    assert any(p.path == "moe.arrow" and "cap" in p.problem for p in read.partial), read.partial
