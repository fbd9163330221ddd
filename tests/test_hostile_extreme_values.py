"""Finite numbers at the edge of the float range (red-team wave 2).

A loss logged as 1.7e308 is a finite float: it passes every "is it finite" check, and then the
chart's padding (x1.15), the span to -1.7e308 or a tick at 10**309 overflow. That ended
`tscope analyze` (and `tscope report` of a case.json holding it) in an OverflowError traceback,
and numpy's overflow warnings added source lines to stderr.
"""

from __future__ import annotations

import json
import math
import re
import shutil
from pathlib import Path

import pytest
from hostile import run_tscope

from tscope.render.series import AXIS_LIMIT, Scale, choose_scale, nice_ticks, ticks_for

GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.mark.parametrize(
    "values",
    [
        [2.9, 2.8, 1.7e308],  # log scale: the padding overflowed
        [-1.7e308, 2.8, 1.7e308],  # linear: the span overflowed
        [1.7e308, 1.7e308],  # flat at the limit
        [5e-324, 2.8, 3.1],  # a subnormal on a log axis
    ],
)
def test_axes_of_values_at_the_float_limit_are_finite_with_finite_ticks(values):
    scale = choose_scale(values, log_above_span=10.0)
    assert math.isfinite(scale.low) and math.isfinite(scale.high) and scale.low < scale.high
    ticks = ticks_for(scale)
    assert ticks and all(math.isfinite(tick) for tick in ticks)
    assert all(0.0 <= scale.fraction(value) <= 1.0 for value in values)


def test_ticks_between_the_float_limits_stay_within_the_axis_limit():
    ticks = nice_ticks(-1.7e308, 1.7e308, target=4)
    assert ticks and all(-AXIS_LIMIT <= tick <= AXIS_LIMIT for tick in ticks)
    assert Scale("linear", -math.inf, math.inf).high == AXIS_LIMIT


def test_analyze_of_a_loss_logged_as_1_7e308_writes_the_case_in_one_piece(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = "".join(
        f"{step},{1.7e308 if step == 40 else 3 - step * 0.01:.6g}\n" for step in range(80)
    )
    (run / "metrics.csv").write_text("step,loss\n" + rows)
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out, cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert "RuntimeWarning" not in outcome.stderr
    assert "1.7e+308" in (out / "case.md").read_text()


def test_report_of_a_case_json_with_chart_values_at_the_float_limit_renders(tmp_path):
    case_dir = tmp_path / "case"
    shutil.copytree(GOLDEN / "incident", case_dir)
    payload = json.loads((case_dir / "case.json").read_text())
    for series in payload["chart_series"].values():
        series["max"][0] = 1.7e308
        series["min"][0] = -1.7e308
    (case_dir / "case.json").write_text(json.dumps(payload))
    outcome = run_tscope("report", case_dir, "--out", tmp_path / "out", cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    svg = (tmp_path / "out" / "case-chart.svg").read_text()
    assert not re.search(r'="[^"]*\b(inf|nan)\b', svg, re.IGNORECASE)  # no coordinate is inf


@pytest.mark.parametrize(
    ("golden", "where", "value"),
    [
        ("incident", ("summary", "card", "cause", "confidence"), -1e308),  # StopIteration
        ("incident", ("summary", "card", "cause", "confidence"), "nan"),
        ("partial", ("layers", "norm_growth", 1, 1), 1e308),  # (1 + rate) ** steps overflowed
    ],
)
def test_report_of_a_hand_edited_out_of_range_number_renders(tmp_path, golden, where, value):
    case_dir = tmp_path / "case"
    shutil.copytree(GOLDEN / golden, case_dir)
    payload = json.loads((case_dir / "case.json").read_text())
    target = payload
    for key in where[:-1]:
        target = target[key]
    target[where[-1]] = value
    (case_dir / "case.json").write_text(json.dumps(payload))
    outcome = run_tscope("report", case_dir, "--out", tmp_path / "out", cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
