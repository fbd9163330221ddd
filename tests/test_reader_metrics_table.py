"""The generic metrics-table reader: CSV/TSV/JSONL/JSON a training script writes itself.

Real files: modded-nanogpt per-step CSVs and Pythia W&B history exports converted to CSV
(../shared/realdata, skipped when absent).
"""

from __future__ import annotations

import json
import math
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.csv as pa_csv
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tscope.errors import UnreadableInput
from tscope.ingest.discover import discover
from tscope.ingest.readers.metrics_table import MetricsTableReader
from tscope.model import LogRead

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"
READER = MetricsTableReader()


def series(read: LogRead, metric: str) -> tuple[np.ndarray, np.ndarray]:
    table = read.metrics.to_frame()
    rows = table[table["metric"] == metric].sort_values("order")
    return rows["step"].to_numpy(), rows["value"].to_numpy()


def write(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def realdata(folder: str) -> Path:
    path = REALDATA / folder
    if not path.is_dir():
        pytest.skip(f"{path} is absent (public training logs, see shared/realdata/README.md)")
    return path


# --- real logs ---------------------------------------------------------------------------------


def test_pythia_14m_seed5_keeps_the_one_step_spike_at_95457() -> None:
    path = realdata("pythia_wandb_export") / "14m-seed5.csv"
    assert READER.can_read(path)

    read = READER.read(path, path.name)

    steps, loss = series(read, "train/loss")
    assert len(steps) == 143_000
    assert loss[steps.tolist().index(95457)] == pytest.approx(4.26, abs=0.01)
    assert set(read.metrics["metric"]) == {"train/loss"}  # the text "segment" column is ignored
    assert read.partial == []


def test_pythia_70m_seed3_three_overlapping_segments_all_read() -> None:
    folder = realdata("pythia_wandb_export")
    ranges = {}
    for path in sorted(folder.glob("70m-seed3_*.csv")):
        assert READER.can_read(path)
        steps, _ = series(READER.read(path, path.name), "train/loss")
        ranges[path.stem.split("_")[1]] = (int(steps[0]), int(steps[-1]))
    assert ranges == {
        "jbbbzp6s": (1, 67770),
        "0ydn3v9s": (1, 143000),
        "50p6gk7r": (67001, 143000),
    }


def test_modded_nanogpt_runs_read_train_and_val_loss_but_not_the_clock() -> None:
    paths = sorted(realdata("modded_nanogpt/runs").glob("*.csv"))
    assert len(paths) == 10
    for path in paths:
        read = READER.read(path, path.name)
        assert set(read.metrics["metric"]) == {"train/loss", "eval/loss"}, path.name
        assert read.partial == []
    steps, loss = series(READER.read(paths[0], paths[0].name), "train/loss")
    assert steps[0] == 1  # step 0 logged only val_loss: no zero train loss is invented
    assert np.isfinite(loss).all()


# --- what training scripts write --------------------------------------------------------------


def test_demo_jsonl_with_separate_eval_lines(tmp_path: Path) -> None:
    # tscope.demo.train writes one line per optimizer step and, at each evaluation (step 0
    # first, before any training line), a separate {"step", "eval/loss"} line.
    lines = []
    for step in range(100):
        if step % 25 == 0:
            lines.append(json.dumps({"step": step, "eval/loss": 3.1 - step / 100}))
        row = {"step": step, "train/loss": 3 - step / 100, "train/grad_norm": 0.5}
        row["train/learning_rate"] = 3e-4
        lines.append(json.dumps(row))
    path = write(tmp_path, "metrics.jsonl", "\n".join(lines) + "\n")
    assert READER.can_read(path)

    read = READER.read(path, "metrics.jsonl")

    assert series(read, "train/loss")[0].tolist() == list(range(100))
    assert series(read, "eval/loss")[0].tolist() == [0, 25, 50, 75]
    assert set(read.metrics["metric"]) == {
        "train/loss",
        "train/grad_norm",
        "train/learning_rate",
        "eval/loss",
    }
    assert read.partial == []


def test_jsonl_nonfinite_values_are_kept_as_logged(tmp_path: Path) -> None:
    # json.dumps writes NaN/Infinity literals; some scripts write the strings instead.
    rows = [
        {"step": 1, "loss": 2.0},
        {"step": 2, "loss": float("nan")},
        {"step": 3, "loss": float("inf")},
        {"step": 4, "loss": "nan"},
        {"step": 5, "loss": None},
    ]
    path = write(tmp_path, "log.jsonl", "".join(json.dumps(r) + "\n" for r in rows))

    steps, loss = series(READER.read(path, "log.jsonl"), "train/loss")

    assert steps.tolist() == [1, 2, 3, 4]  # null is "not logged"
    assert math.isnan(loss[1]) and math.isinf(loss[2]) and math.isnan(loss[3])


def test_jsonl_cut_mid_line_and_mixed_types_are_partial(tmp_path: Path) -> None:
    text = (
        '{"step": 1, "loss": 2.0}\n'
        '{"step": 2, "loss": "diverged"}\n'
        '{"step": 3, "loss": 1.5}\n'
        '{"step": 4, "loss": 1.4}\n'
        '{"step": 5, "lo'
    )
    read = READER.read(write(tmp_path, "log.jsonl", text), "log.jsonl")

    assert series(read, "train/loss")[0].tolist() == [1, 3, 4]
    problems = [p.problem for p in read.partial]
    assert any("1 line(s) that are not a JSON object" in p for p in problems)
    assert any("'loss': 1 non-numeric" in p and "'diverged'" in p for p in problems)


def test_csv_nonfinite_strings_empty_cells_and_mixed_types(tmp_path: Path) -> None:
    text = (
        "iteration,loss,grad_norm,lr,run\n"
        "1,2.5,1.0,1e-3,a1\n"
        "2,nan,NaN,1e-3,a1\n"
        "3,inf,-inf,,a1\n"
        "4,oops,1.0,1e-3,a1\n"
        "5,2.0,,1e-3,a1\n"
    )
    read = READER.read(write(tmp_path, "log.csv", text), "log.csv")

    steps, loss = series(read, "train/loss")
    assert steps.tolist() == [1, 2, 3, 5]
    assert math.isnan(loss[1]) and math.isinf(loss[2])
    assert series(read, "train/grad_norm")[0].tolist() == [1, 2, 3, 4]
    assert series(read, "train/learning_rate")[0].tolist() == [1, 2, 4, 5]
    assert "run" not in set(read.metrics["metric"])
    assert [p.problem for p in read.partial] == [
        "column 'loss': 1 non-numeric cell(s) skipped (first 'oops' in data row 4)"
    ]


def test_backwards_and_duplicate_steps_stay_in_file_order(tmp_path: Path) -> None:
    text = "step,loss\n1,3.0\n2,2.9\n3,2.8\n2,2.95\n3,2.85\n3,2.84\n4,2.7\n"
    read = READER.read(write(tmp_path, "log.csv", text), "log.csv")
    steps, loss = series(read, "train/loss")
    assert steps.tolist() == [1, 2, 3, 2, 3, 3, 4]
    assert loss.tolist() == [3.0, 2.9, 2.8, 2.95, 2.85, 2.84, 2.7]
    assert read.partial == []


def test_rows_without_a_usable_step_are_skipped_and_counted(tmp_path: Path) -> None:
    text = "step,loss\n1,3.0\n,2.9\n2.5,2.8\nabc,2.7\n3,2.6\n"
    read = READER.read(write(tmp_path, "log.csv", text), "log.csv")
    assert series(read, "train/loss")[0].tolist() == [1, 3]
    assert any("3 row(s) with values but no usable step" in p.problem for p in read.partial)


def test_absurd_numbers_do_not_overflow(tmp_path: Path) -> None:
    huge = "1" + "0" * 400  # a JSON integer beyond float range
    text = f'{{"step": 1, "loss": 2.0}}\n{{"step": {huge}, "loss": 1.0}}\n{{"step": 3, "loss": {huge}}}\n'
    read = READER.read(write(tmp_path, "log.jsonl", text), "log.jsonl")
    steps, loss = series(read, "train/loss")
    assert steps.tolist() in ([1], [1, 3])  # a huge loss is either inf or skipped as not a number
    assert loss[0] == 2.0
    assert any("no usable step" in p.problem for p in read.partial)


def test_truncated_csv_line_is_skipped_and_reported(tmp_path: Path) -> None:
    text = "step,loss,grad_norm\n1,3.0,1.0\n2,2.9,1.1\n3,2."
    read = READER.read(write(tmp_path, "log.csv", text), "log.csv")
    assert series(read, "train/loss")[0].tolist() == [1, 2]
    assert "1 malformed row(s) skipped" in read.partial[0].problem


def test_tsv_and_json_list_of_records(tmp_path: Path) -> None:
    tsv = write(tmp_path, "log.tsv", "global_step\ttrain_loss\n10\t2.0\n20\t1.9\n")
    records = write(
        tmp_path,
        "log.json",
        json.dumps([{"Step": 1, "val_loss": 3.0}, {"Step": 2, "val_loss": 2.9}]),
    )
    assert READER.can_read(tsv) and READER.can_read(records)
    assert series(READER.read(tsv, "log.tsv"), "train/loss")[0].tolist() == [10, 20]
    assert series(READER.read(records, "log.json"), "eval/loss")[1].tolist() == [3.0, 2.9]


@pytest.mark.parametrize(
    ("name", "body"),
    [
        ("log.csv", "step,loss\r\n1,2.0\r\n"),
        ("log.jsonl", '{"step": 1, "loss": 2.0}\n'),
        ("log.json", '[{"step": 1, "loss": 2.0}]'),
    ],
)
def test_files_saved_with_a_byte_order_mark(tmp_path: Path, name: str, body: str) -> None:
    path = tmp_path / name
    path.write_bytes(b"\xef\xbb\xbf" + body.encode())
    assert READER.can_read(path)
    assert series(READER.read(path, name), "train/loss")[1].tolist() == [2.0]


def test_clock_columns_and_other_counters_are_not_metrics(tmp_path: Path) -> None:
    text = "step,epoch,iter,loss,train_time_ms,wall_time,timestamp,step_time_s\n1,0,1,2.0,5,6,7,8\n"
    read = READER.read(write(tmp_path, "log.csv", text), "log.csv")
    assert set(read.metrics["metric"]) == {"train/loss", "epoch"}


def test_two_columns_with_one_canonical_name_stay_two_series(tmp_path: Path) -> None:
    path = write(tmp_path, "log.csv", "step,loss,train/loss,train_loss\n1,2.0,3.0,4.0\n")
    read = READER.read(path, "log.csv")
    named = dict(zip(read.metrics["metric"], read.metrics["value"], strict=True))
    assert named == {"loss": 2.0, "train/loss": 3.0, "train_loss": 4.0}


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("empty.csv", ""),
        ("header.csv", "step,loss\n"),
        ("onlystep.csv", "step\n1\n2\n"),
        ("empty.jsonl", "\n\n"),
        ("garbage.jsonl", "not json\nalso not\n"),
        ("cut.json", '[{"step": 1, "loss": 2.0}, {"step": 2, "lo'),
        ("scalar.json", '{"step": 5, "loss": 2.0}'),
        ("textsteps.csv", "step,loss\na,1\nb,2\nc,3\n"),
    ],
)
def test_unusable_tables_raise_unreadable(tmp_path: Path, name: str, text: str) -> None:
    with pytest.raises(UnreadableInput):
        READER.read(write(tmp_path, name, text), name)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("no_step.csv", "epoch_time,loss\n1,2.0\n"),
        ("notes.txt", "step,loss\n1,2.0\n"),
        ("config.json", '{"step_size": 10, "lr": 0.1}'),
        ("summary.json", '{"step": 10, "loss": 2.0}'),
        ("history.csv", "_step,_runtime,loss\n1,0.1,2.0\n"),
        ("export.csv", '"Step","r - loss","r - loss__MIN","r - loss__MAX"\n1,2,2,2\n'),
        ("trainer_state.json", '{"best_metric": null, "global_step": 5, "log_history": []}'),
    ],
)
def test_can_read_declines_what_is_not_a_step_table_or_belongs_to_wandb(
    tmp_path: Path, name: str, text: str
) -> None:
    assert not READER.can_read(write(tmp_path, name, text))


@settings(max_examples=80, deadline=None)
@given(
    data=st.binary(max_size=300),
    suffix=st.sampled_from([".csv", ".tsv", ".jsonl", ".json"]),
)
def test_arbitrary_bytes_never_escape_as_anything_but_unreadable(
    tmp_path_factory: pytest.TempPathFactory, data: bytes, suffix: str
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / f"log{suffix}"
    path.write_bytes(b"step,loss\n" + data if suffix in (".csv", ".tsv") else data)
    READER.can_read(path)
    try:
        read = READER.read(path, path.name)
    except UnreadableInput:
        return
    assert read.metrics["step"].dtype == np.int64


@settings(max_examples=40, deadline=None)
@given(cut=st.integers(0, 2000), flip=st.integers(0, 2000))
def test_truncated_or_flipped_jsonl_never_crashes(
    tmp_path_factory: pytest.TempPathFactory, cut: int, flip: int
) -> None:
    rows = "".join(json.dumps({"step": s, "loss": 2 - s / 100}) + "\n" for s in range(80))
    data = bytearray(rows.encode()[:cut])
    if flip < len(data):
        data[flip] ^= 0x80
    path = tmp_path_factory.mktemp("fuzz") / "log.jsonl"
    path.write_bytes(bytes(data))
    try:
        read = READER.read(path, path.name)
    except UnreadableInput:
        return
    steps, _ = series(read, "train/loss")
    assert set(steps.tolist()) <= set(range(80))  # a flipped byte never invents a step


def test_discovery_routes_each_table_to_its_reader(tmp_path: Path) -> None:
    write(tmp_path, "metrics.jsonl", '{"step": 1, "train/loss": 2.0}\n')
    write(tmp_path, "history.csv", "_step,loss\n1,2.0\n")
    write(tmp_path, "export.csv", '"Step","r - loss","r - loss__MAX"\n1,2,2\n')
    write(tmp_path, "notes.csv", "name,value\na,1\n")

    found = discover(tmp_path)

    kinds = {read.path: read.kind for read in found.reads}
    assert kinds == {
        "metrics.jsonl": "metrics_table",
        "history.csv": "wandb_history",
        "export.csv": "wandb_export",
    }
    assert found.unclaimed == ["notes.csv"]


# --- size --------------------------------------------------------------------------------------

LARGE_ROWS = 1_000_000
# Measured 2.2-2.5 s for 1M rows x 3 metrics on a 2-core machine busy with other jobs; the
# bound leaves room for slow CI while still failing a per-row Python loop (~10x slower).
LARGE_READ_SECONDS = 10.0


def test_a_million_row_csv_reads_in_seconds(tmp_path: Path) -> None:
    steps = np.arange(LARGE_ROWS)
    frame = pd.DataFrame(
        {
            "step": steps,
            "loss": np.round(2 + np.sin(steps / 1000), 4),
            "grad_norm": 1.0,
            "lr": 3e-4,
            "train_time_ms": steps * 7,
        }
    )
    path = tmp_path / "big.csv"
    pa_csv.write_csv(pa.Table.from_pandas(frame, preserve_index=False), path)  # 10x to_csv

    started = time.perf_counter()
    read = READER.read(path, "big.csv")
    elapsed = time.perf_counter() - started

    assert len(read.metrics) == 3 * LARGE_ROWS
    assert elapsed < LARGE_READ_SECONDS


def test_a_table_logged_once_per_epoch_is_read_on_the_epoch_axis(tmp_path: Path) -> None:
    # Keras' CSVLogger (epoch 0-based, no step column) was "unknown format" (healthy-run hunt).
    from tscope.pipeline import analyze_run

    rows = ["epoch,accuracy,loss,val_accuracy,val_loss"]
    for epoch in range(30):
        loss = 0.7 * math.exp(-epoch / 8) + 0.02
        rows.append(
            f"{epoch},{1 - loss / 2:.4f},{loss:.5f},{0.8 + epoch / 300:.4f},{loss + 0.1:.5f}"
        )
    (tmp_path / "training.log.csv").write_text("\n".join(rows) + "\n")
    case, run = analyze_run(tmp_path)
    from tscope.model.metric_names import LOSS

    steps, _ = run.series(LOSS)
    assert steps.tolist() == list(range(30))
    assert "epoch_axis" in [c.kind for c in case.caveats]
    assert case.summary.status == "healthy"
    assert not any(name.endswith("epoch") for name in run.metric_names)
