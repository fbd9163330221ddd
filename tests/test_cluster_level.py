"""Issue 11: `tscope cluster` calls a run unstable against its level before the event.

Before, only a loss ≥ 2× the median of its first 5 points counted; for pretraining that is
2 × ln V, which no run can reach, so a resume that lost the weights (2.2 → 11.1) stayed "stable".
The planted run here is a real Pythia-70M W&B export (../shared/realdata) with a weights-lost
resume spliced in: from step 40,000 the log repeats the run's own first 26,000 steps (a model
re-initialized at the resume learns again from ln V). The healthy controls are all of
realdata's per-step loss logs (modded-nanogpt's 70 runs with their recurring data bumps, the
Pythia exports with their one-step spikes, and three Trainer logs incl. a spiky DPO run).
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tscope.analyzers.cluster.profile import (
    BASELINE_POINTS,
    EXPLOSION_FACTOR,
    explosion_candidates,
    first_above_level,
    profile_run,
)
from tscope.model.case import Case
from tscope.model.cluster import LossCurve

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"
if not REALDATA.exists():
    REALDATA = Path("/work/shared/realdata")
needs_realdata = pytest.mark.skipif(not REALDATA.exists(), reason="../shared/realdata absent")


def _pythia(name: str = "70m-seed3_0ydn3v9s.csv") -> LossCurve:
    frame = pd.read_csv(REALDATA / "pythia_wandb_export" / name)
    return LossCurve(frame["step"].to_numpy(np.int64), frame["loss"].to_numpy(np.float64))


def _healthy_logs() -> list[tuple[str, np.ndarray]]:
    logs = []
    for path in sorted(REALDATA.glob("modded_nanogpt/*/*.csv")):
        frame = pd.read_csv(path)
        logs.append((path.name, frame["train_loss"].to_numpy(np.float64)))
    for path in sorted(REALDATA.glob("pythia_wandb_export/*.csv")):
        logs.append((path.name, pd.read_csv(path)["loss"].to_numpy(np.float64)))
    for path in sorted(REALDATA.glob("hf_trainer_state/*.json")):
        history = json.loads(path.read_text(encoding="utf-8"))["log_history"]
        logs.append((path.name, np.array([r["loss"] for r in history if "loss" in r], float)))
    return logs


@needs_realdata
def test_weights_lost_at_a_resume_is_unstable_at_the_resume():
    curve = _pythia()
    resume, relearn = 40_000, 26_000
    index = int(np.searchsorted(curve.steps, resume))
    values = curve.values.copy()
    values[index : index + relearn] = curve.values[:relearn]
    planted = LossCurve(curve.steps, values)
    # the old criterion cannot see it: the untrained level is the run's first points
    early = float(np.median(curve.values[:BASELINE_POINTS]))
    assert values.max() < EXPLOSION_FACTOR * early
    profile = profile_run("70m-weights-lost", "", Case.from_dict({"schema_version": "1"}), planted)
    assert profile.status == "unstable"
    assert profile.explosion_step == resume and profile.explosion_kind == "above_level"
    assert profile.failure_mode == "recovered"  # back near its level 26k steps later


@needs_realdata
def test_healthy_real_logs_never_cross_their_level():
    logs = _healthy_logs()
    assert len(logs) >= 70
    crossed = [name for name, values in logs if first_above_level(values) is not None]
    assert crossed == []  # 0 of 77: the false-alarm rate behind EXPLOSION_FACTOR


def test_a_run_with_no_level_yet_still_uses_its_early_baseline():
    values = np.array([4.0, 4.1, 3.9, 9.0, 9.5, 9.7])
    curve = LossCurve(np.arange(1, 7), values)
    assert first_above_level(values) is None  # fewer than MIN_LEVEL_POINTS before it
    assert explosion_candidates(curve, 4.0, []) == [(4, "above_baseline")]
