"""W&B readers: the offline run log, the UI panel export and history()/scan_history() dumps.

The offline fixture `tests/data/wandb_offline/` was written by the real wandb 0.31 client
(tests/data/make_wandb_offline.py): 200 steps, a 3x loss spike at step 120 with the grad norm
jumping at 118-120, a NaN loss at step 150 and an eval loss every 50 steps. Corner cases the
client does not produce (block padding, MIDDLE records, a resumed or crashed run) are written with
a small encoder of the documented layout (DOMAIN.md §4) below.
"""

from __future__ import annotations

import json
import math
import struct
import zlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tscope.errors import UnreadableInput
from tscope.ingest.discover import discover
from tscope.ingest.readers.metrics_table import MetricsTableReader
from tscope.ingest.readers.wandb_export import WandbExportReader
from tscope.ingest.readers.wandb_framing import BLOCK_SIZE, split_records
from tscope.ingest.readers.wandb_history import WandbHistoryReader
from tscope.ingest.readers.wandb_offline import WandbOfflineReader
from tscope.model import LogRead

FIXTURE_DIR = Path(__file__).resolve().parent / "data" / "wandb_offline"
FIXTURE = next(FIXTURE_DIR.glob("run-*.wandb"))
OFFLINE = WandbOfflineReader()
EXPORT = WandbExportReader()
HISTORY = WandbHistoryReader()
GENERIC = MetricsTableReader()


def series(read: LogRead, metric: str) -> tuple[np.ndarray, np.ndarray]:
    rows = read.metrics[read.metrics["metric"] == metric].sort_values("order")
    return rows["step"].to_numpy(), rows["value"].to_numpy()


# --- offline run log written by wandb itself -------------------------------------------------


def test_offline_fixture_reads_every_logged_step_with_the_spike_and_the_nan() -> None:
    read = OFFLINE.read(FIXTURE, "wandb/run-x/run.wandb")

    steps, loss = series(read, "train/loss")
    assert steps.tolist() == list(range(200))
    trend = 4.0 * math.exp(-120 / 80) + 2.0
    assert loss[120] == pytest.approx(3 * trend)
    assert math.isnan(loss[150])
    _, grad_norm = series(read, "train/grad_norm")
    assert grad_norm[118:121].tolist() == [25.0, 25.0, 25.0]
    assert grad_norm[117] == 1.0
    eval_steps, _ = series(read, "eval/loss")
    assert eval_steps.tolist() == [0, 50, 100, 150]  # sparse rows: no zeros filled in
    assert set(read.metrics["metric"]) == {
        "train/loss",
        "train/grad_norm",
        "train/learning_rate",
        "eval/loss",
    }
    assert read.partial == []
    assert read.caveats == []  # the run finished: it has an exit record
    assert read.started_at is not None and read.started_at > 1.6e9


def test_offline_config_comes_from_the_log_without_wandb_internals() -> None:
    read = OFFLINE.read(FIXTURE, "run.wandb")
    assert read.config["learning_rate"] == pytest.approx(3e-4)
    assert read.config["batch_size"] == 8
    assert read.config["model"] == {"layers": 2}
    assert "_wandb" not in read.config
    assert read.config["wandb_summary"]["train/loss"] == pytest.approx(2.3324700032)


def test_offline_can_read_needs_the_magic_bytes(tmp_path: Path) -> None:
    assert OFFLINE.can_read(FIXTURE)
    impostor = tmp_path / "run-abc.wandb"
    impostor.write_bytes(b"not a wandb log")
    assert not OFFLINE.can_read(impostor)
    renamed = tmp_path / "run.bin"
    renamed.write_bytes(FIXTURE.read_bytes())
    assert not OFFLINE.can_read(renamed)


@pytest.mark.parametrize(
    "content",
    [b"", b":W&B", b"XXXX\xe1\xbe\x00", b":W&B\xe1\xbe\x01" + b"\x00" * 20],
    ids=["empty", "short", "bad-magic", "unknown-version"],
)
def test_offline_unusable_files_raise_unreadable(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "run-x.wandb"
    path.write_bytes(content)
    with pytest.raises(UnreadableInput):
        OFFLINE.read(path, "run-x.wandb")


def test_offline_run_cut_mid_record_keeps_what_came_before(tmp_path: Path) -> None:
    data = FIXTURE.read_bytes()
    path = tmp_path / "run-x.wandb"
    path.write_bytes(data[: BLOCK_SIZE + 5000])  # a live run: the writer is mid-block

    read = OFFLINE.read(path, "run-x.wandb")

    steps, _ = series(read, "train/loss")
    assert 50 < len(steps) < 200
    assert steps.tolist() == list(range(len(steps)))
    assert any("ends inside a record" in p.problem for p in read.partial)
    assert [c.kind for c in read.caveats] == ["no_exit_record"]


def test_offline_damaged_record_skips_its_block_and_reads_the_next(tmp_path: Path) -> None:
    data = bytearray(FIXTURE.read_bytes())
    data[2000] ^= 0xFF  # inside the first block
    path = tmp_path / "run-x.wandb"
    path.write_bytes(bytes(data))

    read = OFFLINE.read(path, "run-x.wandb")

    steps, _ = series(read, "train/loss")
    assert 199 in steps  # the last block is intact
    assert len(steps) < 200
    assert any("damaged record" in p.problem for p in read.partial)


@settings(max_examples=60, deadline=None)
@given(cut=st.integers(0, 90_000), flips=st.lists(st.integers(0, 90_000), max_size=4))
def test_offline_truncated_or_corrupted_never_crashes(
    tmp_path_factory: pytest.TempPathFactory, cut: int, flips: list[int]
) -> None:
    data = bytearray(FIXTURE.read_bytes()[:cut])
    for position in flips:
        if position < len(data):
            data[position] ^= 0x5A
    path = tmp_path_factory.mktemp("fuzz") / "run-x.wandb"
    path.write_bytes(bytes(data))
    try:
        read = OFFLINE.read(path, "run-x.wandb")
    except UnreadableInput:
        return
    assert read.metrics["step"].dtype == np.int64


# --- offline corner cases, written with the documented layout --------------------------------


def varint(value: int) -> bytes:
    value &= (1 << 64) - 1
    out = bytearray()
    while True:
        byte = value & 0x7F
        value >>= 7
        if value:
            out.append(byte | 0x80)
        else:
            out.append(byte)
            return bytes(out)


def field(number: int, value: bytes | int) -> bytes:
    if isinstance(value, int):
        return varint(number << 3) + varint(value)
    return varint(number << 3 | 2) + varint(len(value)) + value


def history_record(step: int | None, items: dict[str, str], plain_key: bool = False) -> bytes:
    body = b""
    for key, value_json in items.items():
        key_field = field(1, key.encode()) if plain_key else field(2, key.encode())
        body += field(1, key_field + field(16, value_json.encode()))
    if step is not None:
        body += field(2, field(1, step))
    return field(2, body)


def number_item_record(step: int, key: str, value: float) -> bytes:
    item = field(2, key.encode()) + varint(6 << 3 | 1) + struct.pack("<d", value)
    return field(2, field(1, item) + field(2, field(1, step)))


def config_record(items: dict[str, str], removed: tuple[str, ...] = ()) -> bytes:
    updates = b"".join(
        field(1, field(1, k.encode()) + field(16, v.encode())) for k, v in items.items()
    )
    removals = b"".join(field(2, field(1, key.encode())) for key in removed)
    return field(5, updates + removals)


def integer_item_record(step: int, key: str, value: int) -> bytes:
    zigzag = (value << 1) ^ (value >> 63)
    item = field(2, key.encode()) + varint(5 << 3) + varint(zigzag)
    return field(2, field(1, item) + field(2, field(1, step)))


def run_record(resumed_at: int | None = None) -> bytes:
    body = field(17, field(1, 1_700_000_000))
    if resumed_at is not None:
        body += field(18, 1) + field(14, resumed_at)
    return field(17, body)


def exit_record(code: int) -> bytes:
    return field(18, field(1, code))


def frame(payloads: list[bytes]) -> bytes:
    out = bytearray(b":W&B" + struct.pack("<HB", 0xBEE1, 0))
    for payload in payloads:
        remaining, first = payload, True
        while True:
            left = BLOCK_SIZE - len(out) % BLOCK_SIZE
            if left < 7:
                out += b"\x00" * left
                continue
            chunk, remaining = remaining[: left - 7], remaining[left - 7 :]
            last = not remaining
            kind = (1 if last else 2) if first else (4 if last else 3)
            crc = zlib.crc32(chunk, zlib.crc32(bytes([kind])))
            out += struct.pack("<IHB", crc, len(chunk), kind) + chunk
            first = False
            if last:
                break
    return bytes(out)


def padded_to(record_size: int, step: int) -> bytes:
    """A history record of exactly `record_size` bytes (a long text item W&B would log)."""

    def record(filler: int) -> bytes:
        return history_record(step, {"loss": "1.5", "note": json.dumps("x" * filler)})

    filler = record_size - len(record(0))  # then back off what the longer length varints add
    while len(record(filler)) > record_size:
        filler -= 1
    assert len(record(filler)) == record_size, "pick another record_size"
    return record(filler)


def test_split_records_handles_block_padding_and_records_over_many_blocks() -> None:
    fills_block_but_3 = padded_to(BLOCK_SIZE - 7 - 7 - 3, step=0)  # 3 bytes of padding follow
    spans_three_blocks = history_record(1, {"loss": "2.5", "note": json.dumps("y" * 70_000)})
    tail = history_record(2, {"loss": "3.5"})
    data = frame([fills_block_but_3, spans_three_blocks, tail])

    payloads, problems = split_records(data)

    assert payloads == [fills_block_but_3, spans_three_blocks, tail]
    assert problems == []


def test_offline_reads_plain_keys_doubles_global_step_resume_and_exit_code(
    tmp_path: Path,
) -> None:
    run_dir = tmp_path / "wandb" / "run-20240101_000000-abc"
    (run_dir / "files").mkdir(parents=True)
    payloads = [
        run_record(resumed_at=1000),
        config_record({"_wandb": "{}", "lr": "0.001"}),
        history_record(None, {"_step": "7", "loss": "2.0"}, plain_key=True),
        number_item_record(8, "grad_norm", 0.5),
    ]
    hf_rows = [
        history_record(9 + i, {"train/loss": str(1.0 + i), "train/global_step": str(1000 + 10 * i)})
        for i in range(3)
    ]
    (run_dir / "run-abc.wandb").write_bytes(frame([*payloads, *hf_rows, exit_record(-9)]))
    (run_dir / "files" / "config.yaml").write_text(
        "wandb_version: 1\n_wandb:\n  value: {cli_version: 0.16}\nlr:\n  value: 0.002\n"
        "warmup:\n  desc: null\n  value: 100\n"
    )
    (run_dir / "files" / "wandb-summary.json").write_text(
        json.dumps({"train/loss": 3.0, "_step": 11, "_wandb": {"runtime": 5}})
    )

    read = OFFLINE.read(run_dir / "run-abc.wandb", "run-abc.wandb")

    # The run logs train/global_step, so it is the step; rows without it are reported.
    steps, loss = series(read, "train/loss")
    assert steps.tolist() == [1000, 1010, 1020]
    assert loss.tolist() == [1.0, 2.0, 3.0]
    assert "train/global_step" not in set(read.metrics["metric"])
    assert any("without train/global_step" in p.problem for p in read.partial)
    assert read.config["lr"] == 0.002  # files/config.yaml is the final word
    assert read.config["warmup"] == 100
    assert "_wandb" not in read.config and "wandb_version" not in read.config
    assert read.config["wandb_summary"] == {"train/loss": 3.0}
    assert read.started_at == 1_700_000_000
    kinds = {event.kind: event for event in read.events}
    assert kinds["resume"].step == 1000
    assert kinds["exit"].numbers["exit_code"] == -9


def test_offline_without_global_step_uses_the_step_item_and_double_values(tmp_path: Path) -> None:
    path = tmp_path / "run-x.wandb"
    payloads = [
        history_record(None, {"_step": "7", "loss": "2.0", "media": '{"_type": "image"}'}, True),
        number_item_record(8, "grad_norm", 0.5),
        history_record(None, {"loss": "9"}),  # no step at all
    ]
    path.write_bytes(frame(payloads))

    read = OFFLINE.read(path, "run-x.wandb")

    assert series(read, "train/loss")[0].tolist() == [7]
    assert series(read, "train/grad_norm")[1].tolist() == [0.5]
    assert "media" not in set(read.metrics["metric"])
    assert any("without a step" in p.problem for p in read.partial)


def test_offline_config_keeps_each_keys_last_update_and_honours_removals(
    tmp_path: Path,
) -> None:
    path = tmp_path / "run-x.wandb"
    payloads = [
        config_record({"lr": "0.1", "warmup": "10", "model": '{"layers": 2}'}),
        history_record(1, {"loss": "2.0"}),
        config_record({"lr": "0.05"}, removed=("warmup",)),
        config_record({"note": '"resumed"'}),
        integer_item_record(2, "loss", -3),
    ]
    path.write_bytes(frame(payloads))

    read = OFFLINE.read(path, "run-x.wandb")

    assert read.config == {"lr": 0.05, "model": {"layers": 2}, "note": "resumed"}
    assert series(read, "train/loss")[1].tolist() == [2.0, -3.0]


def test_offline_broken_sibling_files_are_partial_not_fatal(tmp_path: Path) -> None:
    (tmp_path / "files").mkdir()
    (tmp_path / "files" / "config.yaml").write_text("lr: [unclosed\n")
    (tmp_path / "files" / "wandb-summary.json").write_text('{"loss": 1.')
    (tmp_path / "run-x.wandb").write_bytes(FIXTURE.read_bytes())

    read = OFFLINE.read(tmp_path / "run-x.wandb", "run-x.wandb")

    problems = " ".join(p.problem for p in read.partial)
    assert "config.yaml" in problems and "wandb-summary.json" in problems
    assert len(series(read, "train/loss")[0]) == 200


def test_discovery_reads_the_run_log_and_leaves_the_sidecar_files_alone(tmp_path: Path) -> None:
    run_dir = tmp_path / "wandb" / "offline-run-20240101_000000-abc"
    (run_dir / "files").mkdir(parents=True)
    (run_dir / "run-abc.wandb").write_bytes(FIXTURE.read_bytes())
    (run_dir / "files" / "wandb-summary.json").write_text('{"_step": 199, "train/loss": 2.3}')
    (run_dir / "files" / "wandb-metadata.json").write_text('{"host": "x", "args": []}')
    (run_dir / "files" / "config.yaml").write_text("lr:\n  value: 0.1\n")

    found = discover(tmp_path)

    assert [(read.kind, read.path) for read in found.reads] == [
        ("wandb_offline", "wandb/offline-run-20240101_000000-abc/run-abc.wandb")
    ]
    assert found.reads[0].config["lr"] == 0.1


# --- UI panel export --------------------------------------------------------------------------


def ui_export(runs: dict[str, np.ndarray], bucket: int, x_axis: str = "Step") -> pd.DataFrame:
    """Bucket like the panel: last value per bucket, with the bucket's min and max."""
    frame = pd.DataFrame()
    for run, values in runs.items():
        steps = np.arange(len(values))
        buckets = pd.Series(values).groupby(steps // bucket)
        frame[x_axis] = buckets.apply(lambda b: b.index[-1]).to_numpy()
        frame[f"{run} - train/loss"] = buckets.last().to_numpy()
        frame[f"{run} - train/loss__MIN"] = buckets.min().to_numpy()
        frame[f"{run} - train/loss__MAX"] = buckets.max().to_numpy()
    return frame


def spiky_loss(length: int = 1000, spike_at: int = 503) -> np.ndarray:
    loss = np.linspace(4.0, 2.0, length)
    loss[spike_at] = 9.0
    return loss


def test_export_max_column_keeps_the_spike_the_main_column_hides(tmp_path: Path) -> None:
    path = tmp_path / "wandb_export_2024-05-01.csv"
    ui_export({"brisk-pond-1": spiky_loss()}, bucket=10).to_csv(path, index=False)
    assert EXPORT.can_read(path)

    read = EXPORT.read(path, path.name)

    _, main = series(read, "train/loss")
    _, maxima = series(read, "train/loss__max")
    _, minima = series(read, "train/loss__min")
    assert main.max() < 5.0  # the spike is not the last value of its bucket
    assert maxima.max() == 9.0
    assert minima.min() == pytest.approx(2.0, abs=0.01)
    assert read.caveats[0].kind == "downsampled_export"
    assert path.name in read.caveats[0].message
    assert read.partial == []


def test_export_with_several_runs_reads_the_first_and_names_the_others(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    runs = {"run - a": spiky_loss(), "quiet-b": np.full(1000, 3.0), "c": np.full(1000, 1.0)}
    ui_export(runs, bucket=10).to_csv(path, index=False)

    read = EXPORT.read(path, "export.csv")

    _, maxima = series(read, "train/loss__max")
    assert maxima.max() == 9.0  # "run - a": split at the last " - "
    assert set(read.metrics["original_name"].str.split(" - train").str[0]) == {"run - a"}
    assert "'quiet-b'" in read.partial[0].problem and "'c'" in read.partial[0].problem


def test_group_export_warns_that_runs_are_aggregated(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    ui_export({"Group: sweep-7": spiky_loss()}, bucket=5).to_csv(path, index=False)
    read = EXPORT.read(path, "export.csv")
    assert {c.kind for c in read.caveats} == {"downsampled_export", "grouped_export"}


def test_export_with_a_non_step_x_axis_uses_the_runs_step_column(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    frame = ui_export({"r1": spiky_loss(100, 50)}, bucket=1, x_axis="epoch")
    frame["epoch"] = frame["epoch"] / 10
    frame.to_csv(path, index=False)
    with pytest.raises(UnreadableInput, match="Step as the x-axis"):
        EXPORT.read(path, "export.csv")

    frame["r1 - _step"] = np.arange(100) * 4
    frame["r1 - _step__MIN"] = frame["r1 - _step"]
    frame.to_csv(path, index=False)
    read = EXPORT.read(path, "export.csv")
    assert series(read, "train/loss")[0][:3].tolist() == [0, 4, 8]
    assert "_step" not in set(read.metrics["metric"])


def test_export_skips_empty_cells_and_other_readers_decline_it(tmp_path: Path) -> None:
    path = tmp_path / "export.csv"
    path.write_text(
        '"Step","r - train/loss","r - train/loss__MIN","r - train/loss__MAX"\n'
        "0,3.0,3.0,3.0\n10,,,\n20,NaN,NaN,NaN\n"
    )
    read = EXPORT.read(path, "export.csv")
    steps, values = series(read, "train/loss")
    assert steps.tolist() == [0, 20]
    assert math.isnan(values[1])
    assert not GENERIC.can_read(path)
    assert not HISTORY.can_read(path)


# --- history() / scan_history() dumps ----------------------------------------------------------


def history_frame(rows: int = 300) -> pd.DataFrame:
    """What run.history() returns: every key a column, NaN where a row did not log it."""
    steps = np.arange(rows)
    return pd.DataFrame(
        {
            "_step": steps,
            "_runtime": steps * 0.5,
            "_timestamp": 1.7e9 + steps * 0.5,
            "train/loss": np.linspace(4, 2, rows),
            "eval/loss": np.where(steps % 100 == 0, 3.0, np.nan),
            "lr": 3e-4,
        }
    )


def test_history_csv_written_by_pandas_reads_without_zeros_or_clocks(tmp_path: Path) -> None:
    path = tmp_path / "history.csv"
    history_frame().to_csv(path)  # pandas writes the index as an unnamed first column
    assert HISTORY.can_read(path) and not GENERIC.can_read(path) and not EXPORT.can_read(path)

    read = HISTORY.read(path, "history.csv")

    assert set(read.metrics["metric"]) == {"train/loss", "eval/loss", "train/learning_rate"}
    assert series(read, "eval/loss")[0].tolist() == [0, 100, 200]
    assert read.started_at == pytest.approx(1.7e9)
    assert read.caveats == []


@pytest.mark.parametrize("layout", ["records-json", "jsonl", "pandas-columns-json"])
def test_history_json_layouts_read_sparse_scan_history_rows(tmp_path: Path, layout: str) -> None:
    # scan_history yields dicts holding only the keys each row logged.
    rows = [{"_step": s, "_runtime": s / 2, "train/loss": 4 - s / 100} for s in range(50)]
    rows[10]["eval/loss"] = 3.5
    rows[20]["train/loss"] = float("nan")
    path = tmp_path / ("history.jsonl" if layout == "jsonl" else "history.json")
    if layout == "records-json":
        path.write_text(json.dumps(rows))
    elif layout == "jsonl":
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    else:
        pd.DataFrame(rows).to_json(path)
    assert HISTORY.can_read(path) and not GENERIC.can_read(path)

    read = HISTORY.read(path, path.name)

    assert series(read, "eval/loss")[0].tolist() == [10]
    steps, loss = series(read, "train/loss")
    if layout == "pandas-columns-json":
        assert 20 not in steps  # pandas writes NaN as null: indistinguishable from not logged
    else:
        assert math.isnan(loss[steps.tolist().index(20)])


def test_history_prefers_the_integrations_global_step_over_wandb_step(tmp_path: Path) -> None:
    path = tmp_path / "history.jsonl"
    rows = [{"_step": i, "train/global_step": 10 * i, "train/loss": 2.0 - i / 10} for i in range(5)]
    rows.append({"_step": 5, "custom": 1.0})  # a direct wandb.log without the step
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))

    read = HISTORY.read(path, "history.jsonl")

    assert series(read, "train/loss")[0].tolist() == [0, 10, 20, 30, 40]
    assert any("no usable step in 'train/global_step'" in p.problem for p in read.partial)


def test_history_of_exactly_500_rows_is_flagged_as_sampled(tmp_path: Path) -> None:
    path = tmp_path / "history.csv"
    history_frame(500).to_csv(path, index=False)
    read = HISTORY.read(path, "history.csv")
    assert [c.kind for c in read.caveats] == ["sampled_history"]


def test_summary_file_is_not_a_history_dump(tmp_path: Path) -> None:
    path = tmp_path / "wandb-summary.json"
    path.write_text(json.dumps({"_step": 199, "_runtime": 3.2, "train/loss": 2.3}))
    assert not HISTORY.can_read(path)
    assert not GENERIC.can_read(path)
    assert not EXPORT.can_read(path)


@pytest.mark.parametrize(
    "content",
    ["", "_step,loss\n", "_step,_runtime\n1,2\n", "_step,loss\nx,y\nz,w\n"],
    ids=["empty", "header-only", "no-metric", "no-numbers"],
)
def test_history_unusable_dumps_raise_unreadable(tmp_path: Path, content: str) -> None:
    path = tmp_path / "history.csv"
    path.write_text(content)
    with pytest.raises(UnreadableInput):
        HISTORY.read(path, "history.csv")
