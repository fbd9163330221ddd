"""Sanity checks of the committed learning-rate sweep fixture (fixtures/data/sweep/), not of tscope.

The high-LR runs must really have diverged and the low-LR runs must be healthy, as the Trainer
logged them; otherwise a clustering test built on this sweep proves nothing.
Regenerate with `.venv/bin/python fixtures/make_sweep_runs.py`.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

SWEEP = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "sweep"
STABLE_RUNS = ("lr0.001_seed1234", "lr0.002_seed7", "lr0.003_seed1234", "lr0.005_seed7")
DIVERGED_RUNS = ("lr5_seed7", "lr6_seed1234", "lr8_seed7", "lr12_seed1234")
ALL_RUNS = STABLE_RUNS + DIVERGED_RUNS
TOTAL_STEPS = 160


def _manifest(name: str) -> dict[str, Any]:
    return json.loads((SWEEP / name / "manifest.json").read_text(encoding="utf-8"))


def _loss_rows(name: str) -> list[dict[str, Any]]:
    state = json.loads((SWEEP / name / "trainer_state.json").read_text(encoding="utf-8"))
    return [row for row in state["log_history"] if "loss" in row]


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def test_exactly_the_expected_runs() -> None:
    assert sorted(p.name for p in SWEEP.iterdir() if p.is_dir()) == sorted(ALL_RUNS)


@pytest.mark.parametrize("name", ALL_RUNS)
def test_run_dir_is_trainer_output_without_checkpoints(name: str) -> None:
    run_dir = SWEEP / name
    assert (run_dir / "trainer_state.json").is_file()
    assert (run_dir / "manifest.json").is_file()
    assert not list(run_dir.glob("checkpoint-*"))
    events = list((run_dir / "runs").glob("events.out.tfevents.*"))
    assert len(events) == 1
    manifest = _manifest(name)
    # The Trainer's TensorBoard `args` text names the run's own learning rate and seeds.
    raw = events[0].read_bytes()
    assert f'"learning_rate": {manifest["learning_rate"]!r}'.encode() in raw
    assert f'"seed": {manifest["seed"]}'.encode() in raw
    assert b'"data_seed": 1234' in raw
    assert b'"save_strategy": "no"' in raw
    rows = _loss_rows(name)
    assert [row["step"] for row in rows] == list(range(1, TOTAL_STEPS + 1))


def test_grid_mixes_two_seeds_and_shares_the_data_order() -> None:
    manifests = [_manifest(name) for name in ALL_RUNS]
    for group in (STABLE_RUNS, DIVERGED_RUNS):
        assert {_manifest(name)["seed"] for name in group} == {1234, 7}
    assert len({json.dumps(m["first_batch_sample_ids"]) for m in manifests}) == 1
    assert {m["data_seed"] for m in manifests} == {1234}
    assert max(_manifest(n)["learning_rate"] for n in STABLE_RUNS) < min(
        _manifest(n)["learning_rate"] for n in DIVERGED_RUNS
    )


@pytest.mark.parametrize("name", DIVERGED_RUNS)
def test_high_lr_runs_diverge(name: str) -> None:
    rows = _loss_rows(name)
    assert _manifest(name)["expected_status"] == "diverged"
    baseline = rows[0]["loss"]  # the untrained model, about ln 96
    # Far above the start at some point (the blow-up), in every diverged run.
    assert max(row["loss"] for row in rows if _finite(row["loss"])) > 20 * baseline
    # And it ends either non-finite (the Trainer logs such losses as 0.0, grad_norm NaN) or far
    # above its early baseline.
    tail = rows[-10:]
    nonfinite_tail = all(not _finite(row["grad_norm"]) for row in tail)
    ends_high = all(_finite(row["loss"]) for row in tail) and (
        sum(row["loss"] for row in tail) / len(tail) > baseline + 1.0
    )
    assert nonfinite_tail or ends_high


@pytest.mark.parametrize("name", STABLE_RUNS)
def test_low_lr_runs_stay_healthy(name: str) -> None:
    rows = _loss_rows(name)
    assert _manifest(name)["expected_status"] == "stable"
    assert all(_finite(row["loss"]) and _finite(row["grad_norm"]) for row in rows)
    baseline = rows[0]["loss"]
    assert max(row["loss"] for row in rows) <= baseline + 0.05
    final = sum(row["loss"] for row in rows[-10:]) / 10
    assert final < baseline - 1.0  # 4.5 -> about 3.0-3.2
    assert rows[-1]["learning_rate"] < 1e-5  # the cosine has decayed to ~0
