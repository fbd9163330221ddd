"""Counts and steps below zero, named for what they are.

`tscope xray` of a training_args.bin with per_device_train_batch_size -4 said "lengths: give at
least one sequence length." although no --lengths was given; an MLflow SQLite store's negative
steps were reported as "beyond 2**53".
"""

from __future__ import annotations

import pickle
import sqlite3
from pathlib import Path

import pytest
from hostile import run_tscope
from test_reader_mlflow_sqlite import _store

from tscope.errors import UnreadableInput
from tscope.ingest.base import choosing_run
from tscope.model.metric_names import LOSS
from tscope.pipeline import analyze_run
from tscope.xray.trainer_run import read_settings


@pytest.mark.parametrize(
    ("arguments", "fragment"),
    [
        ({"per_device_train_batch_size": -4}, "per_device_train_batch_size = -4"),
        ({"per_device_train_batch_size": 0}, "per_device_train_batch_size = 0"),
        ({"gradient_accumulation_steps": -2}, "gradient_accumulation_steps = -2"),
        ({"seed": -5}, "seed = -5"),
        ({"seed": 2**200}, "seed = a 201-bit integer"),
    ],
)
def test_xray_refuses_a_count_below_one_naming_training_args(tmp_path: Path, arguments, fragment):
    run = tmp_path / "run"
    run.mkdir()
    (run / "training_args.bin").write_bytes(pickle.dumps(arguments, protocol=2))
    with pytest.raises(UnreadableInput) as caught:
        read_settings(run)
    assert caught.value.path.endswith("training_args.bin")
    assert fragment in caught.value.problem


def test_xray_on_the_command_line_is_one_line_about_the_batch_size(tmp_path: Path):
    run = tmp_path / "run"
    run.mkdir()
    crafted = {"per_device_train_batch_size": -4}
    (run / "training_args.bin").write_bytes(pickle.dumps(crafted, protocol=2))
    outcome = run_tscope("xray", run, "--out", tmp_path / "out")
    outcome.assert_one_line_error("training_args.bin", "per_device_train_batch_size = -4")
    assert "lengths" not in outcome.stderr


def test_mlflow_sqlite_negative_steps_are_named_as_negative(tmp_path: Path):
    path = _store(tmp_path)
    with sqlite3.connect(path) as connection:
        connection.execute("UPDATE metrics SET step = -step - 1 WHERE step < 5")
    connection.close()
    with choosing_run("healthy"):
        case, run = analyze_run(path)
    assert min(run.series(LOSS)[0].tolist()) == 5
    problems = [p.problem for p in case.partial]
    assert any("with a negative step left out" in problem for problem in problems), problems
    assert not any("2**53" in problem for problem in problems), problems
