"""Log lines crafted against the text readers' regexes (red-team wave 2).

A regex that scans to the end of the line from every place it could start is quadratic in the
line: Megatron's validation pattern (`valid loss at [^|]*\\|`) on a 1 MB line of "valid loss at "
with no "|" hung `tscope analyze` (over 90 s for a 4 MB log), and the Trainer-stdout sniff
(`\\{'...': [^\\n]*'epoch': `) spent 7 s on each crafted 64 kB head. The fixed readers still read
real logs (tests/test_reader_megatron_log.py, tests/test_reader_text_logs.py).
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from hostile import run_tscope

from tscope.ingest.readers.megatron_log import MegatronLogReader
from tscope.ingest.readers.trainer_stdout import TrainerStdoutReader

MEGATRON_RECORD = (
    " iteration       {step}/    1000 | consumed samples: {samples} | lm loss: {loss:.6E} |"
    " grad norm: 1.000 |\n"
)


def megatron_head(steps: int = 40) -> str:
    return "".join(
        MEGATRON_RECORD.format(step=s, samples=8 * s, loss=3.0 - 0.01 * s)
        for s in range(1, steps + 1)
    )


def test_a_megatron_log_of_pipe_less_validation_starts_is_read_in_linear_time(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    line = "valid loss at " * 150_000  # 2.1 MB: two 1 MB pieces, no "|"
    hostile = megatron_head() + line + "\n" + "| " + line + "\n"  # a "|" before the starts too
    (run / "train.log").write_text(hostile)
    outcome = run_tscope("analyze", run, "--out", tmp_path / "case", timeout=60)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]


def test_a_validation_record_is_still_read(tmp_path: Path):
    log = tmp_path / "train.log"
    validation = (
        " validation loss at iteration 40 on validation set | lm loss value: 2.500000E+00 |"
        " lm loss PPL: 1.2E+01 |\n"
    )
    log.write_text(megatron_head() + validation)
    assert MegatronLogReader().can_read(log)
    read = MegatronLogReader().read(log, "train.log")
    rows = read.metrics[read.metrics["step"] == 40]
    values = dict(zip(rows["metric"], rows["value"], strict=True))
    assert values["eval/loss"] == pytest.approx(2.5)


def test_trainer_stdout_sniff_of_a_crafted_head_is_fast_and_still_recognizes_rows(tmp_path: Path):
    crafted = tmp_path / "crafted.log"
    crafted.write_text(("{'a': " * 11_000 + "\n") * 2)  # two 64 kB lines, no 'epoch'
    reader = TrainerStdoutReader()
    started = time.perf_counter()
    assert not reader.can_read(crafted)
    # 2.8 s before the fix, 0.006 s after (this machine): the bound leaves 150x either way
    assert time.perf_counter() - started < 1.0
    nested = tmp_path / "nested.log"
    nested.write_text("{'loss': {'a': 1}, 'grad_norm': 2.0, 'epoch': 0.5}\n")
    assert reader.can_read(nested)
    printed = tmp_path / "printed.log"
    printed.write_text("[INFO] {'grad_norm': 2.0, 'learning_rate': 1e-4, 'epoch': 0.5}\n")
    assert reader.can_read(printed)


def test_overlong_metric_names_are_left_out_with_a_caveat_not_repeated_per_point(tmp_path):
    """Ten 1 MB column names in a 10 MB CSV once made a 1 GB case.html and a 1 GB SVG (each name
    repeats in every chart point's tooltip): 5 GB of memory and 3.5 minutes."""
    run = tmp_path / "run"
    run.mkdir()
    names = ["loss"] + [f"m{index}_" + "x" * 200_000 for index in range(5)]
    rows = [",".join(["step", *names])]
    for step in range(100):
        values = [3 - 0.01 * step] + [1.0 + 0.01 * index for index in range(5)]
        rows.append(",".join([str(step), *(f"{value:.3f}" for value in values)]))
    (run / "metrics.csv").write_text("\n".join(rows) + "\n")
    out = tmp_path / "case"
    outcome = run_tscope("analyze", run, "--out", out, timeout=120)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    written = sum(path.stat().st_size for path in out.iterdir())
    assert written < 1_000_000  # 100 MB before
    case = json.loads((out / "case.json").read_text())
    assert "train/loss" in case["metrics"]
    caveats = [c["message"] for c in case["caveats"] if c["kind"] == "series_name_length"]
    assert caveats and "5 series" in caveats[0] and len(caveats[0]) < 1000


def test_report_of_a_case_json_with_an_overlong_series_name_is_one_line(tmp_path):
    """The same names in a crafted case.json: 2 MB made 32 MB of report with 12 points a series
    (a tooltip per point), so a case.json holding one is refused."""
    case_dir = tmp_path / "case"
    case_dir.mkdir()
    golden = Path(__file__).resolve().parent / "golden" / "incident" / "case.json"
    payload = json.loads(golden.read_text())
    series = next(iter(payload["chart_series"].values()))
    payload["chart_series"]["m_" + "x" * 200_000] = series
    (case_dir / "case.json").write_text(json.dumps(payload))
    outcome = run_tscope("report", case_dir, "--out", tmp_path / "out")
    outcome.assert_one_line_error("series name of 200002 characters")
    assert len(outcome.stderr) < 1000
