"""The Megatron(-DeepSpeed) stdout log reader: wrapped records, rewinds, the arguments block,
overflows, validation lines, truncated logs.

Fixtures are in tests/data/text_logs/ (sources in SOURCES.md); the public BigScience logs in
../shared/realdata/ are read when present.
"""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from text_log_helpers import DATA, megatron_record, series, write

from tscope.ingest.readers.megatron_log import MegatronLogReader
from tscope.model import LogRead

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "megatron_logs"


def at(read: LogRead, step: int) -> dict[str, float]:
    rows = read.metrics[read.metrics["step"] == step]
    return dict(zip(rows["metric"], rows["value"], strict=True))


def test_megatron_records_wrapped_by_the_terminal_keep_every_field() -> None:
    read = MegatronLogReader().read(DATA / "megatron_wrapped.log", "megatron_wrapped.log")
    # "learning\n rate" and "number of nan\niterations" were split across lines.
    wrapped = at(read, 42780)
    assert wrapped["train/learning_rate"] == pytest.approx(4.475e-05)
    assert wrapped["train/loss"] == pytest.approx(2.117073)
    assert wrapped["train/nan_iterations"] == 0.0
    assert wrapped["train/tflops"] == pytest.approx(149.10)
    assert wrapped["train/step_time_ms"] == pytest.approx(105_160.0)  # printed in seconds
    # "number of skipped iteratio\nns" was split mid-word.
    mid_word = at(read, 13251)
    assert mid_word["train/skipped_steps"] == 0.0
    assert mid_word["train/learning_rate"] == pytest.approx(5.996e-05)
    assert mid_word["train/loss_scale"] == 524288.0
    assert read.partial == []


def test_megatron_rows_stay_in_file_order_across_a_rewind_and_notes() -> None:
    read = MegatronLogReader().read(DATA / "megatron_wrapped.log", "megatron_wrapped.log")
    losses = series(read, "train/loss")
    assert [step for step, _ in losses] == [
        31251,
        42780,
        42781,
        42782,
        42783,
        42784,
        45000,
        8600,
        12000,
        12001,
        13251,
        14000,
    ]
    assert series(read, "eval/loss") == [(45000, 2.327091)]
    assert read.metrics.to_frame()["order"].is_monotonic_increasing


def test_megatron_arguments_block_becomes_config() -> None:
    read = MegatronLogReader().read(DATA / "megatron_overflow.log", "megatron_overflow.log")
    assert read.config["fp16"] is True
    assert read.config["log_interval"] == 1
    assert read.config["adam_eps"] == pytest.approx(1e-08)
    assert read.config["clip_grad"] == 1.0
    assert read.config["tensorboard_dir"] is None
    assert read.config["rampup_batch_size"] == "['16', '16', '6_000_000']"
    assert read.config["save"] == "/checkpoints/tr8b"
    assert read.config["train_iters"] == 159576


def test_deepspeed_overflow_is_an_event_at_the_iteration_it_precedes() -> None:
    read = MegatronLogReader().read(DATA / "megatron_overflow.log", "megatron_overflow.log")
    overflows = [(e.step, e.numbers["from_scale"], e.numbers["to_scale"]) for e in read.events]
    assert overflows == [
        (17062, 1048576.0, 1048576.0),
        (17063, 1048576.0, 524288.0),
        (17064, 524288.0, 262144.0),
        (17065, 262144.0, 131072.0),
        (17067, 131072.0, 65536.0),
        (17068, 65536.0, 32768.0),
    ]
    assert {event.kind for event in read.events} == {"overflow"}
    assert [value for _, value in series(read, "train/loss_scale")][-1] == 32768.0


def test_megatron_overflows_inside_a_logging_window_merge_at_its_closing_record(
    tmp_path: Path,
) -> None:
    overflow = (
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: {}, reducing to {}\n"
    )
    text = (
        overflow.format(65536, 32768)  # before the first record: in the window it closes
        + megatron_record(10)
        + overflow.format(32768, 16384)
        + overflow.format(16384, 8192)
        + megatron_record(20)
        + megatron_record(30)
        + overflow.format(8192, 4096)  # after the last record: at most one step later
    )
    read = MegatronLogReader().read(write(tmp_path, "train.log", text), "train.log")
    events = {event.step: event.numbers for event in read.events}
    assert events[20] == {"from_scale": 32768.0, "to_scale": 8192.0, "overflows": 2}
    assert events[31]["to_scale"] == 4096.0
    assert sorted(events) == [10, 20, 31]
    assert any(c.kind == "logging_window" and "log_interval=10" in c.message for c in read.caveats)


def test_megatron_log_that_ends_before_the_first_iteration(tmp_path: Path) -> None:
    text = (
        "------------------------ arguments ------------------------\n"
        "  fp16 ............................................ True\n"
        "-------------------- end of arguments ---------------------\n"
        "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 65536, reducing to 32768\n"
        "Traceback (most recent call last):\n"
    )
    read = MegatronLogReader().read(write(tmp_path, "train.log", text), "train.log")
    assert read.config == {"fp16": True}
    assert read.metrics.empty and read.events == []
    problems = " ".join(p.problem for p in read.partial)
    assert "before any iteration" in problems and "no iteration was logged" in problems


def test_megatron_skipped_iterations_and_nan_loss(tmp_path: Path) -> None:
    skipped = megatron_record(3, loss="NAN").replace(
        "number of skipped iterations:   0", "number of skipped iterations:   2"
    )
    read = MegatronLogReader().read(
        write(tmp_path, "slurm-123.out", megatron_record(2) + skipped), "slurm-123.out"
    )
    assert [(e.kind, e.step, e.numbers) for e in read.events] == [
        ("skipped_step", 3, {"skipped_iterations": 2.0})
    ]
    assert math.isnan(at(read, 3)["train/loss"])
    assert at(read, 2)["train/loss"] == 2.5


def test_megatron_validation_variants_and_extra_losses(tmp_path: Path) -> None:
    text = (
        megatron_record(100, tail="").replace(
            "| loss scale", "| load_balancing_loss: 1.020000E+00 | loss scale"
        )
        + " validation loss at iteration 100 on validation set | lm loss value: 2.9E+00 | "
        "lm loss PPL: 1.8E+01 | \n"
        + " validation loss at the end of training for val data | lm loss value: 2.8E+00 | \n"
        + " validation loss at the end of training for test data | lm loss value: 2.7E+00 | \n"
    )
    read = MegatronLogReader().read(write(tmp_path, "run.log", text), "run.log")
    assert series(read, "eval/loss") == [(100, 2.9), (100, 2.8)]
    assert series(read, "test/loss") == [(100, 2.7)]
    assert series(read, "load_balancing_loss") == [(100, 1.02)]
    assert "lm loss PPL" not in set(read.metrics["original_name"])


def test_megatron_record_wrapped_right_after_a_separator(tmp_path: Path) -> None:
    record = megatron_record(7)
    cut = record.index("| grad norm") + 1
    text = record[:cut] + "\n" + record[cut:] + "time (ms) | forward-compute: 12.5 |\n"
    read = MegatronLogReader().read(write(tmp_path, "run.log", text), "run.log")
    assert at(read, 7)["train/grad_norm"] == pytest.approx(1.234)
    assert at(read, 7)["train/skipped_steps"] == 0.0
    assert "forward-compute" not in set(read.metrics["original_name"])


def test_truncated_megatron_log_drops_only_the_cut_field(tmp_path: Path) -> None:
    whole = (DATA / "megatron_overflow.log").read_text()
    cut_at = whole.rindex("lm loss: 4.137348E+00") + len("lm loss: 4.13")
    read = MegatronLogReader().read(write(tmp_path, "cut.log", whole[:cut_at]), "cut.log")
    last = at(read, 17068)
    assert "train/loss" not in last  # "4.13" is a cut-off number, not a loss
    assert last["train/learning_rate"] == pytest.approx(5.948e-05)
    assert any("cut off" in p.problem for p in read.partial)


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
@pytest.mark.parametrize(
    ("name", "records", "loss_points", "eval_points"),
    [
        ("tr1-13B-base__chronicles.log", 10, 10, 0),
        ("tr11-176B-ml__chronicles-prequel.log", 6, 6, 0),
        ("tr11-176B-ml__chronicles.log", 18, 18, 1),
        ("tr8-104B-wide__chronicles.log", 19, 18, 1),
        ("tr8b-104B__chronicles.log", 19, 19, 0),
    ],
)
def test_realdata_megatron_chronicles_parse(
    name: str, records: int, loss_points: int, eval_points: int
) -> None:
    path = REALDATA / name
    reader = MegatronLogReader()
    assert reader.can_read(path)
    read = reader.read(path, name)
    assert len(series(read, "train/learning_rate")) == records
    assert len(series(read, "train/loss")) == loss_points
    assert len(series(read, "eval/loss")) == eval_points
    assert read.partial == []


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
def test_realdata_13b_spike_at_29050_is_present() -> None:
    path = REALDATA / "tr1-13B-base__chronicles.log"
    losses = dict(series(MegatronLogReader().read(path, path.name), "train/loss"))
    assert losses[29040] == pytest.approx(2.768131)
    assert losses[29050] == pytest.approx(7.343709)
    assert losses[29060] == pytest.approx(8.715872)


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
def test_realdata_176b_spike_and_104b_overflows() -> None:
    big = REALDATA / "tr11-176B-ml__chronicles.log"
    losses = dict(series(MegatronLogReader().read(big, big.name), "train/loss"))
    assert losses[31219] == pytest.approx(5.098124)
    wide = REALDATA / "tr8b-104B__chronicles.log"
    events = MegatronLogReader().read(wide, wide.name).events
    assert [e.step for e in events if e.kind == "overflow"] == [
        17062,
        17063,
        17064,
        17065,
        17067,
        17068,
    ]
