"""The rules from issue 13: planted causes where each must fire, healthy controls where none may."""

from __future__ import annotations

import numpy as np

from tests.synthetic import loss_curve, make_run, stable_run, warmup_cosine
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE, LOSS
from tscope.pipeline import build_case

ALERTS = ("critical", "warning")


def categories(case, severities=ALERTS):
    return [f.category for f in case.findings if f.severity in severities]


# --- too few points to judge ---------------------------------------------------------------------


def test_a_handful_of_loss_points_is_insufficient_data_not_healthy():
    run = make_run({LOSS: loss_curve(8, 0), LEARNING_RATE: warmup_cosine(8)})
    summary = build_case(run, []).summary
    assert summary["status"] == "insufficient_data"
    assert "only 8 finite points of train/loss" in summary["verdict"]
    assert summary["missing"] and summary["next_steps"]


def test_no_loss_series_is_insufficient_data():
    run = make_run({LEARNING_RATE: warmup_cosine(100)})
    summary = build_case(run, []).summary
    assert summary["status"] == "insufficient_data"
    assert "no loss series" in summary["verdict"]


def test_enough_points_are_judged_healthy():
    assert build_case(stable_run(steps=40, seed=1), []).summary["status"] == "healthy"


def test_a_short_run_that_blew_up_is_still_an_incident():
    loss = loss_curve(10, 0)
    loss[-2:] = np.nan
    summary = build_case(make_run({LOSS: loss, GRAD_NORM: np.ones(10)}), []).summary
    assert summary["status"] == "incident"
