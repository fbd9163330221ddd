"""A CSV header of repeated names is held to the column cap like any wide header.

`step,loss,x,x,…` was read whole because repeated names "cannot be chosen one by one": 200,000
columns in a 400 KB file took 1.3 GB, 2,000,000 in 4 MB 12 GB. A repeated name stands for its
first column (the one a table keeps), and the partial line says why the others are not read.
"""

from __future__ import annotations

from pathlib import Path

import tscope
from tests.hostile import run_tscope
from tscope.ingest.logs.series_cap import MAX_TABLE_COLUMNS

REPEATS = MAX_TABLE_COLUMNS + 2000


def test_repeated_column_names_past_the_cap_are_read_once(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rows = ["step,loss" + ",x" * REPEATS]
    rows += [f"{step},{3.0 - 0.1 * step}" + ",1" * REPEATS for step in range(1, 6)]
    (run / "metrics.csv").write_text("\n".join(rows) + "\n")

    case = tscope.analyze(run)

    assert "train/loss" in case.metrics
    assert len(case.metrics) <= 3, sorted(case.metrics)
    problems = [p.problem for p in case.partial if p.path.endswith("metrics.csv")]
    assert len(problems) == 1, problems
    assert problems[0].startswith(f"{REPEATS - 1} of its {REPEATS + 2} columns not read")
    assert f"{REPEATS - 1} repeat the name of an earlier column" in problems[0]
    assert "at most" not in problems[0]  # three distinct names: the cap itself left none out


def test_repeated_and_distinct_names_past_the_cap_say_both_reasons(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    names = ["step", "loss"] + [f"c{i}" for i in range(MAX_TABLE_COLUMNS + 10)] + ["x"] * 500
    rows = [",".join(names)]
    rows += [f"{step},{3.0 - 0.1 * step}" + ",1" * (len(names) - 2) for step in range(1, 4)]
    (run / "metrics.csv").write_text("\n".join(rows) + "\n")

    case = tscope.analyze(run)

    problems = [p.problem for p in case.partial if p.path.endswith("metrics.csv")]
    assert len(problems) == 1, problems
    assert f"of its {len(names)} columns not read" in problems[0]
    assert "499 repeat the name of an earlier column" in problems[0]
    assert f"at most {MAX_TABLE_COLUMNS} columns" in problems[0]


def test_rows_shorter_than_a_wide_header_are_said_to_be_malformed_not_absent(
    tmp_path: Path,
) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.csv").write_text("step,loss" + ",x" * 200_000 + "\n1,2\n2,3\n")

    outcome = run_tscope("analyze", run, "--out", tmp_path / "case", "--format", "json")

    outcome.assert_one_line_error("metrics.csv", "none of its 2 data row(s)", "200002 fields")
    assert "holds no data rows" not in outcome.stderr
