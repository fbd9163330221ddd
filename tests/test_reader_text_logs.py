"""The stdout text-log readers: nanoGPT, modded-nanogpt and the HF Trainer's printed dicts, which
files the text readers claim, and bad input (Megatron is tests/test_reader_megatron_log.py).

Fixtures are in tests/data/text_logs/ (sources in SOURCES.md).
"""

from __future__ import annotations

import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from text_log_helpers import DATA, megatron_record, series, write

from tscope.errors import UnreadableInput
from tscope.ingest.discover import discover
from tscope.ingest.readers.megatron_log import MegatronLogReader
from tscope.ingest.readers.metrics_table import MetricsTableReader
from tscope.ingest.readers.nanogpt_log import ModdedNanoGPTLogReader, NanoGPTLogReader
from tscope.ingest.readers.trainer_stdout import TrainerStdoutReader
from tscope.ingest.registry import READERS
from tscope.model import MetricTable

TEXT_READERS = (
    MegatronLogReader(),
    ModdedNanoGPTLogReader(),
    NanoGPTLogReader(),
    TrainerStdoutReader(),
)


NANOGPT_LOG = """Overriding config with config/train_tiny_char.py:
# a small character-level model for a quick run

out_dir = 'out-tiny-char'
eval_interval = 100 # evaluate often
log_interval = 10
always_save_checkpoint = False
import torch
if torch.cuda.is_available():
    device_count = torch.cuda.device_count()
learning_rate = 1e-3 # small model, larger rate
gradient_accumulation_steps = 4
dtype = 'bfloat16' if torch.cuda.is_bf16_supported() else 'float16'

Overriding: compile = False
Overriding: device = cpu
tokens per iteration will be: 16,384
number of parameters: 10.65M
step 0: train loss 4.2874, val loss 4.2823
iter 0: loss 4.2649, time 32119.03ms, mfu -100.00%
iter 10: loss 3.2454, time 160.18ms, mfu -100.00%
iter 20: loss 2.7930, time 158.71ms, mfu 2.31%
iter 30: loss 6.9123, time 158.02ms, mfu 2.32%
iter 40: loss nan, time 157.80ms, mfu 2.33%
step 100: train loss 2.4011, val loss 2.4310
saving checkpoint to out-tiny-char
"""


def test_nanogpt_iterations_evals_and_config(tmp_path: Path) -> None:
    path = write(tmp_path, "train.log", NANOGPT_LOG)
    reader = NanoGPTLogReader()
    assert reader.can_read(path)
    read = reader.read(path, "train.log")
    losses = series(read, "train/loss")
    assert [step for step, _ in losses] == [0, 10, 20, 30, 40]
    assert losses[3][1] == pytest.approx(6.9123)
    assert math.isnan(losses[4][1])
    assert series(read, "eval/loss") == [(0, 4.2823), (100, 2.4310)]
    assert series(read, "eval/train_loss") == [(0, 4.2874), (100, 2.4011)]
    # mfu is -100% until nanoGPT has timed 5 iterations: a placeholder, not a measurement.
    assert [step for step, _ in series(read, "train/mfu_percent")] == [20, 30, 40]
    assert series(read, "train/step_time_ms")[1] == pytest.approx((10, 160.18))
    assert read.config["out_dir"] == "out-tiny-char"
    assert read.config["eval_interval"] == 100
    assert read.config["learning_rate"] == pytest.approx(1e-3)  # after an import and an if
    assert "device_count" not in read.config  # indented: conditional code, not a setting
    assert read.config["always_save_checkpoint"] is False
    assert read.config["compile"] is False
    assert read.config["device"] == "cpu"
    assert read.config["tokens_per_iter"] == 16384
    assert isinstance(read.config["dtype"], str)  # an expression is kept as text, never evaluated
    kinds = {caveat.kind: caveat.message for caveat in read.caveats}
    assert "gradient_accumulation_steps=4" in kinds["last_microbatch_loss"]
    assert "log_interval=10" in kinds["sampled_iterations"]


def test_nanogpt_resume_rewinds_stay_in_file_order_and_fork_fields(tmp_path: Path) -> None:
    text = (
        "iter 100: loss 2.0000, time 12.30ms/step, lr 6.000000e-04, mfu 30.00%\n"
        "iter 110: loss 1.9000, time 12.10ms/step, lr 5.900000e-04, mfu 30.10%\n"
        "iter 100: loss 2.0100, time 13.00ms/step, lr 6.000000e-04, mfu 29.00%\n"
    )
    read = NanoGPTLogReader().read(write(tmp_path, "stdout", text), "stdout")
    assert [step for step, _ in series(read, "train/loss")] == [100, 110, 100]
    assert series(read, "train/learning_rate")[1] == pytest.approx((110, 5.9e-4))
    assert series(read, "train/step_time_ms")[0] == pytest.approx((100, 12.3))


def test_modded_nanogpt_record_log() -> None:
    path = DATA / "modded_nanogpt_2024.txt"
    reader = ModdedNanoGPTLogReader()
    assert reader.can_read(path)
    assert not NanoGPTLogReader().can_read(path)
    read = reader.read(path, path.name)
    losses = series(read, "train/loss")
    assert [step for step, _ in losses] == list(range(1, 16))
    assert losses[0][1] == pytest.approx(16.0051)
    assert series(read, "eval/loss") == [(0, 16.0098)]
    assert read.config["num_iterations"] == 5100
    assert set(read.metrics["metric"]) == {"train/loss", "eval/loss"}  # train_time resets
    assert [c.kind for c in read.caveats] == ["single_rank_loss"]


def test_modded_nanogpt_without_train_loss_and_with_nan(tmp_path: Path) -> None:
    text = (
        "step:0/1770 val_loss:10.8258 train_time:0ms step_avg:0.03ms\n"
        "step:1/1770 train_time:433ms step_avg:433.40ms\n"
        "step:125/1770 val_loss:nan train_time:11000ms step_avg:88.00ms\n"
    )
    read = ModdedNanoGPTLogReader().read(write(tmp_path, "run.txt", text), "run.txt")
    values = series(read, "eval/loss")
    assert [step for step, _ in values] == [0, 125]
    assert math.isnan(values[1][1])
    assert [c.kind for c in read.caveats] == ["no_train_loss"]


def test_modded_nanogpt_found_behind_a_long_script(tmp_path: Path) -> None:
    script = "x = 1  # filler\n" * 10_000  # 160 KB of source before the first step line
    path = write(tmp_path, "run.txt", "=" * 100 + "\n" + script + "step:1/10 train_loss:9.0\n")
    assert ModdedNanoGPTLogReader().can_read(path)  # found in the sniffed tail
    fingerprint_only = write(
        tmp_path, "crashed.txt", "print0(f'step:{step}/{total} val_loss:{loss:.4f}')\n"
    )
    assert ModdedNanoGPTLogReader().can_read(fingerprint_only)
    with pytest.raises(UnreadableInput, match="no modded-nanogpt"):
        ModdedNanoGPTLogReader().read(fingerprint_only, "crashed.txt")


def test_trainer_steps_come_from_the_progress_bar_redrawn_after_each_row() -> None:
    path = DATA / "hf_trainer_tqdm.log"
    reader = TrainerStdoutReader()
    assert reader.can_read(path)
    read = reader.read(path, path.name)
    assert [step for step, _ in series(read, "train/loss")] == [2, 4, 6, 8, 10, 12, 14]
    assert series(read, "eval/loss") == [(4, 3.255), (8, 3.256), (12, 3.257), (15, 3.257)]
    assert series(read, "train/grad_norm")[0] == pytest.approx((2, 0.6542))
    assert series(read, "train/learning_rate")[0] == pytest.approx((2, 0.0009333))
    assert "eval_runtime" not in set(read.metrics["original_name"])
    assert "train_runtime" not in set(read.metrics["original_name"])
    kinds = {caveat.kind: caveat.message for caveat in read.caveats}
    assert "logging_steps=2 steps" in kinds["logging_window"]
    assert "nan_filter" in kinds
    assert "steps_estimated" not in kinds and "steps_are_row_indices" not in kinds


def test_trainer_steps_from_epoch_and_the_start_up_banner() -> None:
    path = DATA / "hf_trainer_printer.log"
    read = TrainerStdoutReader().read(path, path.name)
    assert [step for step, _ in series(read, "train/loss")] == [2, 4, 6, 8, 10, 12, 14]
    assert [step for step, _ in series(read, "eval/loss")] == [4, 8, 12, 15]
    assert read.config["max_steps"] == 15
    assert read.config["num_trainable_parameters"] == 1272
    assert read.config["steps_per_epoch"] == 5
    assert "num_examples" in read.config and read.config["num_examples"] == 20  # not eval's 8
    assert any(caveat.kind == "steps_from_epoch" for caveat in read.caveats)


def test_trainer_rows_without_bar_or_banner_use_row_indices(tmp_path: Path) -> None:
    text = (
        "{'loss': 2.5, 'grad_norm': np.float64(1.5), 'learning_rate': 5e-05, 'epoch': 0.1}\n"
        "some other output {'not': 'a trainer row'}\n"
        "{'loss': nan, 'grad_norm': inf, 'learning_rate': 4e-05, 'epoch': 0.2}\n"
        "{'eval_loss': 2.4, 'eval_runtime': 1.0, 'epoch': 0.2}\n"
        "{'loss': tensor(2.2, device='cuda:0'), 'learning_rate': '3e-05', 'note': 'warm', "
        "'epoch': 0.3}\n"
        "{'train_runtime': 12.0, 'train_loss': 2.4, 'epoch': 0.3}\n"
    )
    read = TrainerStdoutReader().read(write(tmp_path, "train.out", text), "train.out")
    losses = series(read, "train/loss")
    assert [step for step, _ in losses] == [1, 2, 3]
    assert math.isnan(losses[1][1]) and losses[2][1] == pytest.approx(2.2)
    assert series(read, "train/grad_norm") == [(1, 1.5), (2, math.inf)]
    assert series(read, "eval/loss") == [(2, 2.4)]
    assert series(read, "train/learning_rate")[2] == pytest.approx((3, 3e-05))
    assert "note" not in set(read.metrics["original_name"])
    assert any(caveat.kind == "steps_are_row_indices" for caveat in read.caveats)


def test_trainer_row_without_a_redraw_gets_an_estimated_step(tmp_path: Path) -> None:
    bar = "\r 25%|##  | {n}/20 [00:01<00:03,  5.00it/s]"
    text = (
        bar.format(n=4)
        + "\r{'loss': 3.0, 'epoch': 0.25}\n"
        + bar.format(n=5)
        + bar.format(n=10)
        + "\r{'loss': 2.0, 'epoch': 0.5}\n"  # stdout was flushed late: no redraw in between
        + "\r{'loss': 1.5, 'epoch': 0.75}\n"
        + bar.format(n=15)
    )
    read = TrainerStdoutReader().read(write(tmp_path, "train.log", text), "train.log")
    assert [step for step, _ in series(read, "train/loss")] == [5, 10, 15]
    assert any("1 of 3" in c.message for c in read.caveats if c.kind == "steps_estimated")


def test_trainer_rows_flushed_after_the_bar_fall_back_to_row_indices(tmp_path: Path) -> None:
    bars = "".join(f"\r 50%|##  | {n}/20 [00:01<00:03,  5.00it/s]" for n in range(1, 21))
    rows = "".join(f"{{'loss': {3.0 - n / 10}, 'epoch': {n / 4}}}\n" for n in range(1, 5))
    read = TrainerStdoutReader().read(write(tmp_path, "train.log", bars + "\n" + rows), "x")
    assert [step for step, _ in series(read, "train/loss")] == [1, 2, 3, 4]
    assert any(caveat.kind == "steps_are_row_indices" for caveat in read.caveats)


def test_trainer_truncated_row_is_dropped(tmp_path: Path) -> None:
    whole = (DATA / "hf_trainer_printer.log").read_text()
    cut = whole.index("'learning_rate': '0.0002667'")
    read = TrainerStdoutReader().read(write(tmp_path, "cut.log", whole[:cut]), "cut.log")
    assert len(series(read, "train/loss")) == 5


@pytest.mark.parametrize("name", ["metrics.csv", "stdout.csv", "stdout.tsv", "log.json"])
def test_tables_are_never_claimed(tmp_path: Path, name: str) -> None:
    path = write(tmp_path, name, "step,loss\n1,2.5\n" + megatron_record(1) + NANOGPT_LOG)
    assert not any(reader.can_read(path) for reader in TEXT_READERS)


@pytest.mark.parametrize("name", ["train.log", "job-17.out", "job-17.err", "stdout", "run.txt"])
def test_log_names_are_claimed(tmp_path: Path, name: str) -> None:
    assert MegatronLogReader().can_read(write(tmp_path, name, megatron_record(1)))


def test_other_names_and_plain_text_are_not_claimed(tmp_path: Path) -> None:
    assert not NanoGPTLogReader().can_read(write(tmp_path, "train.py", NANOGPT_LOG))
    prose = write(tmp_path, "notes.txt", "We trained for 10 iterations; loss went down.\n")
    assert not any(reader.can_read(prose) for reader in TEXT_READERS)


def test_binary_file_with_a_log_name(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(bytes(range(256)) * 64 + megatron_record(1).encode())
    for reader in TEXT_READERS:
        assert not reader.can_read(path)
        with pytest.raises(UnreadableInput, match="binary"):
            reader.read(path, "train.log")


def test_empty_file(tmp_path: Path) -> None:
    path = write(tmp_path, "train.log", "")
    for reader in TEXT_READERS:
        assert not reader.can_read(path)
        with pytest.raises(UnreadableInput, match=r"no .* training log lines"):
            reader.read(path, "train.log")


def test_zero_filled_tail_after_a_crash_is_tolerated(tmp_path: Path) -> None:
    path = tmp_path / "train.log"
    path.write_bytes(megatron_record(1).encode() + b"\x00" * 5000)
    assert MegatronLogReader().can_read(path)
    assert series(MegatronLogReader().read(path, "train.log"), "train/loss") == [(1, 2.5)]


def test_registry_and_discovery_pick_the_right_reader() -> None:
    names = [reader.name for reader in READERS]
    for reader in TEXT_READERS:
        assert reader.name in names
    assert isinstance(READERS[-1], MetricsTableReader)
    found = discover(DATA)
    kinds = {read.path: read.kind for read in found.reads}
    assert kinds == {
        "hf_trainer_printer.log": "hf_trainer_stdout",
        "hf_trainer_tqdm.log": "hf_trainer_stdout",
        "megatron_overflow.log": "megatron_log",
        "megatron_wrapped.log": "megatron_log",
        "modded_nanogpt_2024.txt": "modded_nanogpt_log",
    }
    assert found.partial == []


FRAGMENTS = [
    megatron_record(5),
    megatron_record(6)[:90] + "\n",
    " validation loss at iteration 5 | lm loss value: ",
    "------------------------ arguments ------------------------\n  lr ....... 1e-4\n",
    "[deepspeed] OVERFLOW! Rank 0 Skipping step. Attempted loss scale: 8, reducing to x\n",
    "iter 3: loss nan, time 1ms, mfu -100.00%\n",
    "step 3: train loss 1.0, val loss \n",
    "Overriding config with c.py:\nx = '\n",
    "step:1/10 train_loss:1e999 val_loss:--\n",
    "{'loss': '1.0', 'epoch': \n",
    "{'loss': [1, {2: (3,)}], 'epoch': 0.1}\n",
    "\r 10%|#  | 3/30 [00:01<00:03,  5.00it/s]",
    "***** Running training *****\n  Total optimization steps = 0\n  Num Epochs = 0\n",
    "\x1b[A\r\n",
    "|||:::\n",
]


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.lists(
        st.one_of(st.sampled_from(FRAGMENTS), st.text(max_size=80), st.binary(max_size=40)),
        max_size=25,
    )
)
def test_arbitrary_text_raises_nothing_but_unreadable_input(pieces: list[str | bytes]) -> None:
    data = b"".join(p if isinstance(p, bytes) else p.encode("utf-8", "replace") for p in pieces)
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "train.log"
        path.write_bytes(data)
        for reader in TEXT_READERS:
            reader.can_read(path)
            try:
                read = reader.read(path, "train.log")
            except UnreadableInput:
                continue
            assert isinstance(read.metrics, MetricTable)
            assert list(read.metrics["order"]) == list(range(len(read.metrics)))
