"""Hostile inputs for the log parsers (issue 9, items 5-7 and 11), through the real CLI.

Each test builds a small crafted file at test time, runs `tscope` in a child process under the
memory and CPU limits of tests/hostile.py and checks the promise of docs/security.md ("Log
parsers"): no traceback, no crash, bounded memory and time, and either exit 2 with one line or a
case whose `partial` names the file and what happened. Each one failed on the code before the fix.
"""

from __future__ import annotations

import json
import shutil
import sys
import textwrap
from pathlib import Path

import pytest

from tests.hostile import run_tscope

WANDB_FIXTURE = Path(__file__).resolve().parent / "data" / "wandb_offline"


def healthy_history(steps: int = 60) -> list[dict[str, float]]:
    return [
        {"step": step, "loss": 3.0 - 0.01 * step, "learning_rate": 1e-4, "epoch": step / 100}
        for step in range(1, steps + 1)
    ]


def write_trainer_state(folder: Path, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "trainer_state.json").write_text(text, encoding="utf-8")
    return folder


def healthy_run(folder: Path) -> Path:
    return write_trainer_state(folder, json.dumps({"log_history": healthy_history()}))


def case_of(out: Path) -> dict[str, object]:
    loaded: dict[str, object] = json.loads((out / "case.json").read_text(encoding="utf-8"))
    return loaded


def partial_problems(out: Path, file_name: str) -> list[str]:
    entries = case_of(out)["partial"]
    assert isinstance(entries, list)
    return [entry["problem"] for entry in entries if file_name in entry["path"]]


# --- item 5: a YAML alias bomb -------------------------------------------------------------------


def test_yaml_alias_bomb_in_wandb_config_is_refused_and_the_log_still_read(tmp_path: Path) -> None:
    run_dir = tmp_path / "run" / "wandb" / "run-x"
    shutil.copytree(WANDB_FIXTURE, run_dir)
    lines = ['a0: &a0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"a{i}: &a{i} [" + ",".join([f"*a{i - 1}"] * 9) + "]" for i in range(1, 9)]
    lines.append("learning_rate: {value: *a8}")  # 9**9 = 387M strings once expanded
    (run_dir / "files").mkdir()
    (run_dir / "files" / "config.yaml").write_text("\n".join(lines) + "\n")
    assert (run_dir / "files" / "config.yaml").stat().st_size < 700

    outcome = run_tscope("analyze", tmp_path / "run", "--out", tmp_path / "case", timeout=60)

    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    problems = partial_problems(tmp_path / "case", ".wandb")
    assert any("config.yaml" in p and "alias" in p for p in problems), problems
    assert "train/loss" in case_of(tmp_path / "case")["metrics"]  # type: ignore[operator]


# --- item 6: nesting and numbers in JSON ---------------------------------------------------------


def test_trainer_state_nested_100k_deep_is_one_line_exit_2(tmp_path: Path) -> None:
    deep = '{"log_history": [' + "[" * 100_000 + "]" * 100_000 + "]}"
    run = write_trainer_state(tmp_path / "run", deep)

    outcome = run_tscope("analyze", run, "--out", tmp_path / "case")

    outcome.assert_one_line_error("trainer_state.json", "nested")


@pytest.mark.parametrize(
    "step",
    ["1e400", "NaN", str(2**63), '"abc"', "[1]", "-5", "2.5"],
    ids=["1e400", "nan", "2^63", "text", "list", "negative", "fraction"],
)
def test_unusable_step_drops_its_row_into_partial(tmp_path: Path, step: str) -> None:
    good = json.dumps(healthy_history())[:-1]  # the list without its closing bracket
    text = '{"global_step": ' + step + ', "log_history": ' + good + ', {"step": ' + step
    text += ', "loss": 1.0}]}'
    run = write_trainer_state(tmp_path / "run", text)

    outcome = run_tscope("analyze", run, "--out", tmp_path / "case", "--format", "json")

    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    problems = partial_problems(tmp_path / "case", "trainer_state.json")
    assert any("step" in p and "skipped" in p for p in problems), problems
    assert case_of(tmp_path / "case")["run"]["last_step"] == 60  # type: ignore[index]


def test_deep_config_json_beside_the_logs_costs_only_its_settings(tmp_path: Path) -> None:
    run = healthy_run(tmp_path / "run")
    (run / "config.json").write_text('{"a": ' + "[" * 100_000 + "]" * 100_000 + "}")

    outcome = run_tscope("analyze", run, "--out", tmp_path / "case", "--format", "json")

    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]


@pytest.mark.parametrize("crafted", ["deep", "huge-int"])
def test_report_on_a_crafted_case_json_is_one_line_exit_2(tmp_path: Path, crafted: str) -> None:
    run = healthy_run(tmp_path / "run")
    case_dir = tmp_path / "case"
    assert run_tscope("analyze", run, "--out", case_dir, "--format", "json").returncode == 0
    text = (case_dir / "case.json").read_text()
    if crafted == "deep":
        text = text.rstrip()[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    else:
        text = text.replace('"last_step": 60', '"last_step": ' + "9" * 5000, 1)
        assert "9" * 5000 in text
    (case_dir / "case.json").write_text(text)

    outcome = run_tscope("report", case_dir)

    outcome.assert_one_line_error("case.json")


def test_cluster_skips_a_run_whose_trainer_state_is_nested_too_deep(tmp_path: Path) -> None:
    sweep = tmp_path / "sweep"
    healthy_run(sweep / "good")
    write_trainer_state(sweep / "deep", '{"log_history": ' + "[" * 100_000 + "]" * 100_000 + "}")

    outcome = run_tscope("cluster", sweep, "--out", tmp_path / "out", "--format", "json", "-j", "1")

    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    report = json.loads((tmp_path / "out" / "cluster.json").read_text())
    assert [entry["run"] for entry in report["skipped"]] == ["deep"]
    assert "nested" in report["skipped"][0]["problem"]


# --- item 7: a crash in a C parser, and a worker that dies ---------------------------------------


def test_jsonl_line_50k_deep_does_not_crash_and_the_other_lines_are_read(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    lines = [json.dumps({"step": step, "loss": 3.0 - 0.01 * step}) for step in range(1, 61)]
    # A key first seen with a 50,000-deep array: pyarrow's reader recursed until SIGSEGV.
    lines.insert(30, '{"step": 31, "attention": ' + "[" * 50_000 + "]" * 50_000 + "}")
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")

    outcome = run_tscope("analyze", run, "--out", tmp_path / "case", "--format", "json")

    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert case_of(tmp_path / "case")["run"]["last_step"] == 60  # type: ignore[index]
    assert partial_problems(tmp_path / "case", "metrics.jsonl")


CRASHING_DRIVER = textwrap.dedent(
    """
    import os, signal, sys
    from multiprocessing import get_context
    import tscope.cluster_pipeline as pipeline
    from tscope.ingest.readers.trainer_state import TrainerStateReader

    original = TrainerStateReader.read

    def crashing_read(self, path, display_path):
        if "crash" in str(path):
            os.kill(os.getpid(), signal.SIGSEGV)  # what pyarrow did on a 50,000-deep line
        return original(self, path, display_path)

    TrainerStateReader.read = crashing_read
    pipeline._pool_context = lambda: get_context("fork")  # workers inherit the patch
    from tscope.cli import main
    sys.argv = ["tscope", *sys.argv[1:]]
    main()
    """
)


@pytest.mark.skipif(sys.platform == "win32", reason="fork and SIGSEGV")
def test_cluster_survives_a_worker_killed_by_a_crashing_reader(tmp_path: Path) -> None:
    import subprocess

    sweep = tmp_path / "sweep"
    for name in ("a-good", "b-crash", "c-good", "d-good"):
        healthy_run(sweep / name)
    driver = tmp_path / "driver.py"
    driver.write_text(CRASHING_DRIVER)
    out = tmp_path / "out"

    completed = subprocess.run(
        [sys.executable, str(driver), "cluster", str(sweep), "--out", str(out), "-j", "2", "-q"],
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
    )

    assert "Traceback" not in completed.stderr, completed.stderr[-3000:]
    assert completed.returncode == 0, completed.stderr[-3000:]
    report = json.loads((out / "cluster.json").read_text())
    assert [entry["run"] for entry in report["skipped"]] == ["b-crash"]
    assert "SIGSEGV" in report["skipped"][0]["problem"]
    assert sorted(run["name"] for run in report["runs"]) == [
        "a-good",
        "c-good",
        "d-good",
    ]


# --- item 11: thousands of series ----------------------------------------------------------------


def test_csv_with_more_columns_than_the_cap_is_analyzed_with_a_caveat(tmp_path: Path) -> None:
    from tscope.ingest.logs.series_cap import MAX_SERIES

    run = tmp_path / "run"
    run.mkdir()
    columns = MAX_SERIES + 500
    header = ["step", "loss"] + [f"layer{i}/grad_norm" for i in range(columns)]
    rows = [",".join(header)]
    for step in range(1, 41):
        rows.append(f"{step},{3.0 - 0.01 * step}," + ",".join(["0.5"] * columns))
    (run / "metrics.csv").write_text("\n".join(rows) + "\n")

    outcome = run_tscope("analyze", run, "--out", tmp_path / "case", "--format", "json")

    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    case = case_of(tmp_path / "case")
    assert "train/loss" in case["metrics"]  # type: ignore[operator]
    assert len(case["metrics"]) == MAX_SERIES  # type: ignore[arg-type]
    caveats = [c for c in case["caveats"] if c["kind"] == "series_cap"]  # type: ignore[union-attr]
    assert caveats and str(MAX_SERIES) in caveats[0]["message"]


def test_csv_with_100k_columns_reads_a_bounded_share_of_them(tmp_path: Path) -> None:
    from tscope.ingest.logs.series_cap import MAX_TABLE_COLUMNS

    run = tmp_path / "run"
    run.mkdir()
    columns = 100_000
    header = ["step", "loss"] + [f"c{i}" for i in range(columns)]
    rows = [",".join(header)] + [
        f"{s},{3.0 - 0.01 * s}," + ",".join(["1"] * columns) for s in (1, 2, 3)
    ]
    (run / "metrics.csv").write_text("\n".join(rows) + "\n")

    outcome = run_tscope("analyze", run, "--out", tmp_path / "case", "--format", "json", timeout=90)

    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    problems = partial_problems(tmp_path / "case", "metrics.csv")
    assert any(f"at most {MAX_TABLE_COLUMNS} columns" in p for p in problems), problems


def test_jsonl_with_many_distinct_keys_is_capped_too(tmp_path: Path) -> None:
    from tscope.ingest.logs.series_cap import MAX_SERIES

    run = tmp_path / "run"
    run.mkdir()
    lines = []
    for step in range(1, 3 * MAX_SERIES):  # a new key on every line, as a crafted file does
        lines.append(json.dumps({"step": step, "loss": 3.0, f"key_{step}": 1.0}))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")

    outcome = run_tscope("analyze", run, "--out", tmp_path / "case", "--format", "json")

    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    case = case_of(tmp_path / "case")
    assert "train/loss" in case["metrics"]  # type: ignore[operator]
    assert len(case["metrics"]) <= MAX_SERIES  # type: ignore[arg-type]
    # Either the sparse columns are left out while parsing, or the series cap cuts them: said.
    capped = any(c["kind"] == "series_cap" for c in case["caveats"])  # type: ignore[union-attr]
    left_out = [p for p in partial_problems(tmp_path / "case", "metrics.jsonl") if "left out" in p]
    assert capped or left_out


def test_a_jsonl_whose_first_line_nests_5000_deep_is_one_line(tmp_path: Path) -> None:
    """The columns of a JSONL are sniffed from its first line; json.loads recursed past Python's
    limit on `[`×5000 (a traceback; found by fuzzing). The sniff now parses under the nesting
    limit: an unreadable first line gives no columns, and the file one line, not a traceback."""
    rows = "".join(json.dumps({"step": s, "loss": 3.0 - 0.01 * s}) + "\n" for s in range(100))
    (tmp_path / "metrics.jsonl").write_text("[" * 5000 + "]" * 5000 + "\n" + rows)
    outcome = run_tscope("analyze", tmp_path, "--out", tmp_path.parent / "out", "--quiet")
    assert outcome.returncode in (0, 2)
    assert "Traceback" not in outcome.stderr and "RecursionError" not in outcome.stderr
    assert len(outcome.stderr.strip().splitlines()) <= 1


def test_a_finite_loss_near_floats_limit_warns_nothing_on_stderr(tmp_path: Path) -> None:
    """A flat loss with one finite value of 1e308: the plateau rule's least-squares sums
    overflowed to inf and NaN (numpy's RuntimeWarning on stderr, a NaN slope; found by fuzzing).
    It compares in units of the largest value now."""
    lines = ["step,loss"] + [f"{s},{2.0 + 0.1 * (s % 2)}" for s in range(100)] + ["100,1e308"]
    (tmp_path / "metrics.csv").write_text("\n".join(lines) + "\n")
    outcome = run_tscope("analyze", tmp_path, "--out", tmp_path.parent / "out", "--quiet")
    assert outcome.returncode == 0
    assert "RuntimeWarning" not in outcome.stderr
