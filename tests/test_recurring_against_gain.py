"""recurring_loss_spikes warns only when the routine bumps are large against the level before
them and not small against what the run had gained (impact.MIN_EXCESS_OF_GAIN): a regression
run's MSE batch means are heavy-tailed, and 3-10x one-batch peaks far under its starting loss
were a warning on a healthy run (a hunt of session 25)."""

from __future__ import annotations

import csv

import numpy as np

from tscope.pipeline import analyze_run


def _log(path, start: float) -> None:
    rng = np.random.default_rng(3)
    rows = []
    for step in range(1, 2001):
        level = 1000.0 + (start - 1000.0) * np.exp(-step / 60)
        value = level * (1 + 0.1 * rng.standard_normal())
        if step > 300 and step % 97 == 0:
            value = level * rng.uniform(3.5, 5.0)  # a heavy-tailed batch, every ~100 steps
        rows.append({"step": step, "loss": value})
    with open(path / "metrics.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["step", "loss"])
        writer.writeheader()
        writer.writerows(rows)


def _recurring(path):
    case, _ = analyze_run(str(path))
    return [f for f in case.findings if f.category == "recurring_loss_spikes"]


def test_bumps_small_against_a_large_gain_are_routine(tmp_path):
    _log(tmp_path, start=200_000.0)
    found = _recurring(tmp_path)
    assert found and found[0].severity == "info"


def test_the_same_bumps_on_a_run_that_gained_little_warn(tmp_path):
    _log(tmp_path, start=1_500.0)
    found = _recurring(tmp_path)
    assert found and found[0].severity == "warning"
