"""The W&B offline run log reader (the UI panel export and history() dumps are
tests/test_reader_wandb_exports.py).

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
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from wandb_helpers import series

from tscope.errors import UnreadableInput
from tscope.ingest.discover import discover
from tscope.ingest.readers.wandb_framing import BLOCK_SIZE, split_records
from tscope.ingest.readers.wandb_offline import WandbOfflineReader

FIXTURE_DIR = Path(__file__).resolve().parent / "data" / "wandb_offline"


FIXTURE = next(FIXTURE_DIR.glob("run-*.wandb"))


OFFLINE = WandbOfflineReader()


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


def test_offline_distinct_history_keys_are_bounded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A crafted 17 MB log of 1,000,000 distinct keys held ~500 MB (a cached name per key, a tuple
    # per item): keys past wandb_records.MAX_HISTORY_KEYS are dropped and counted. Scaled down.
    from tscope.ingest.readers import wandb_records

    monkeypatch.setattr(wandb_records, "MAX_HISTORY_KEYS", 50)
    rows = [
        history_record(
            step, {"loss": str(2.0 - step / 100), **{f"junk{step}_{j}": "1" for j in range(20)}}
        )
        for step in range(10)
    ]
    path = tmp_path / "run-abc.wandb"
    path.write_bytes(frame(rows))

    read = OFFLINE.read(path, "run-abc.wandb")

    steps, _ = series(read, "train/loss")
    assert steps.tolist() == list(range(10))  # the key the log used first is kept
    assert len(set(read.metrics["metric"])) == 50
    # 10 rows of 21 items; kept: the loss in every row and the first 49 other keys
    dropped = [p.problem for p in read.partial if "beyond the first 50 distinct" in p.problem]
    assert dropped and dropped[0].startswith(f"{10 * 21 - (10 + 49)} history item(s)")


def test_a_config_key_path_of_a_thousand_parts_is_not_read(tmp_path: Path) -> None:
    """A config item whose nested_key has 1,000 parts built a dict 1,000 deep, and writing
    case.json recursed through it (RecursionError; found by fuzzing). Key paths longer than
    any config nests are counted as malformed; the run is analyzed."""
    import tscope

    run_dir = tmp_path / "wandb" / "run-20240101_000000-deep"
    run_dir.mkdir(parents=True)
    deep_key = b"".join(field(2, f"k{i}".encode()) for i in range(1000))
    deep_config = field(5, field(1, deep_key + field(16, b"1")))
    rows = [history_record(step, {"loss": str(4.0 - 0.01 * step)}) for step in range(50)]
    (run_dir / "run-deep.wandb").write_bytes(
        frame([run_record(), config_record({"lr": "0.001"}), deep_config, *rows])
    )
    case = tscope.analyze(tmp_path)
    case.to_dict()  # what writing case.json recursed through
    assert case.run.config.get("lr") == 0.001
    assert not any(str(key).startswith("k0") for key in case.run.config)
