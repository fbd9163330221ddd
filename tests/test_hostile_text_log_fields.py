"""Hostile numbers and fields in text logs.

Integers of thousands of digits: no ValueError from Python's 4,300-digit limit. Every reader takes
its steps and counts through text_logs.parse_int, which refuses more than MAX_INT_DIGITS digits:
a step line with such a step is skipped, a setting keeps its text. And modded-nanogpt's fields
are read in linear time.
"""

from __future__ import annotations

from pathlib import Path

from hostile import run_tscope

from tscope.ingest.readers.megatron_log import MegatronLogReader
from tscope.ingest.readers.nanogpt_log import ModdedNanoGPTLogReader, NanoGPTLogReader
from tscope.ingest.readers.text_logs import parse_config_value, parse_int
from tscope.ingest.readers.trainer_stdout import TrainerStdoutReader

# Past int_max_str_digits (4,300): int() of it raises ValueError.
HUGE = "9" * 5000
NANOGPT_LINES = "".join(f"iter {step}: loss 2.5, time 10.0ms, mfu 30.0%\n" for step in range(20))


def _log(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "train.log"
    path.write_text(text)
    return path


def test_parse_int_refuses_more_digits_than_any_count_has():
    assert parse_int("123,456") == 123456
    assert parse_int("9" * 18) == 10**18 - 1
    assert parse_int("9" * 19) is None
    assert parse_int(HUGE) is None
    assert parse_config_value(HUGE) == HUGE  # kept as printed, not a number
    assert parse_config_value("-12") == -12


def test_nanogpt_iteration_with_a_huge_step_is_skipped(tmp_path: Path):
    path = _log(tmp_path, NANOGPT_LINES + f"iter {HUGE}: loss 2.5, time 10.0ms\n")
    read = NanoGPTLogReader().read(path, "train.log")
    assert int(read.metrics["step"].max()) == 19


def test_nanogpt_evaluation_and_override_with_huge_numbers(tmp_path: Path):
    text = f"Overriding: batch_size = {HUGE}\n" + NANOGPT_LINES
    text += f"step {HUGE}: train loss 2.5, val loss 2.6\n"
    read = NanoGPTLogReader().read(_log(tmp_path, text), "train.log")
    assert read.config["batch_size"] == HUGE
    assert int(read.metrics["step"].max()) == 19


def test_modded_nanogpt_huge_step_or_total(tmp_path: Path):
    lines = "".join(f"step:{step}/{HUGE} train_loss:2.5 train_time:1ms\n" for step in range(20))
    lines += f"step:{HUGE}/100 train_loss:2.0\n"
    read = ModdedNanoGPTLogReader().read(_log(tmp_path, lines), "train.log")
    assert int(read.metrics["step"].max()) == 19
    assert "num_iterations" not in read.config


def test_megatron_huge_iteration_is_skipped(tmp_path: Path):
    lines = "".join(
        f" iteration {step}/ 100 | consumed samples: {step * 8} | lm loss: 2.5E+00 |\n"
        for step in range(1, 20)
    )
    lines += f" iteration {HUGE}/ 100 | lm loss: 2.5E+00 |\n"
    lines += f" iteration 20/ {HUGE} | lm loss: 2.5E+00 |\n"
    lines += f" validation loss at iteration {HUGE} | lm loss value: 2.6E+00 |\n"
    read = MegatronLogReader().read(_log(tmp_path, lines), "train.log")
    assert int(read.metrics["step"].max()) == 20
    assert any("impossible iteration" in note.problem for note in read.partial)


def test_trainer_banner_and_bar_with_huge_numbers(tmp_path: Path):
    rows = "".join(
        "{'loss': 2.5, 'learning_rate': 0.001, 'epoch': %s}\n" % (step / 10)
        for step in range(1, 20)
    )
    text = f"***** Running training *****\n  Num examples = {HUGE}\n"
    text += f" 10%|#  | {HUGE}/100 [00:01<00:09]\r" + rows
    read = TrainerStdoutReader().read(_log(tmp_path, text), "train.log")
    assert "num_examples" not in read.config
    assert len(read.metrics) > 0


def test_mlflow_param_of_five_thousand_digits_through_the_cli(tmp_path: Path):
    run = tmp_path / "mlruns" / "0" / "abc"
    (run / "metrics").mkdir(parents=True)
    (run / "params").mkdir()
    (run / "meta.yaml").write_text("run_id: abc\nrun_name: x\nlifecycle_stage: active\n")
    (run / "metrics" / "loss").write_text("".join(f"{s} 2.5 {s}\n" for s in range(20)))
    (run / "params" / "batch_size").write_text(HUGE)
    outcome = run_tscope("analyze", run, "--out", tmp_path / "out")
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]


def test_modded_nanogpt_line_of_one_long_word_is_read_in_linear_time(tmp_path: Path):
    # 200,000 letters without ':' took over 60 s with the old field regex; now well under 1 s.
    lines = "".join(f"step:{step}/100 train_loss:2.5 train_time:1ms\n" for step in range(10))
    lines += "step:11/100 " + "a" * 200_000 + " train_loss:2.0 val_loss:2.25\n"
    read = ModdedNanoGPTLogReader().read(_log(tmp_path, lines), "train.log")
    at_eleven = read.metrics["step"] == 11
    assert sorted(read.metrics["value"][at_eleven].tolist()) == [2.0, 2.25]
