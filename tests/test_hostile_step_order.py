"""A step column that goes back at most rows is not in write order, not a run resumed at every
row (tscope/ingest/assemble.py, UNORDERED_MIN_REWINDS): each rewind was a resume event and a
finding, and a 1.2 MB CSV counting down took 88 s and 1.3 GB (red team, session 27)."""

from __future__ import annotations

from pathlib import Path

import tscope


def test_a_log_counting_down_is_read_in_step_order_without_resumes(tmp_path: Path) -> None:
    rows = "".join(f"{20_000 - i},{1 + (i % 7) * 0.1:.3f}\n" for i in range(20_000))
    (tmp_path / "metrics.csv").write_text("step,loss\n" + rows)
    case = tscope.analyze(tmp_path)
    assert [e for e in case.events if e.kind == "resume"] == []
    assert not [f for f in case.findings if f.category == "resume_discontinuity"]
    assert case.run.first_step == 1 and case.run.last_step == 20_000


def test_a_few_rewinds_are_still_resumes(tmp_path: Path) -> None:
    steps = [*range(1, 301), *range(201, 601), *range(501, 901)]
    rows = "".join(f"{step},{3 - step / 1000:.4f}\n" for step in steps)
    (tmp_path / "metrics.csv").write_text("step,loss\n" + rows)
    case = tscope.analyze(tmp_path)
    assert [e.step for e in case.events if e.kind == "resume"] == [201, 501]
