"""Issue 11: "a loss that jumps from 2.2 to 11.1 (≈ ln V) one step after a resume is only a
warning" (a real W&B export of a public 410M run). Reproduced on the real W&B history export of
Pythia-70M (shared/realdata): the run resumes at 40,001 from a checkpoint at 40,000 after logging
to 41,000, with a fresh model — the re-logged losses from the resume on are the run's own first
26,000 losses (its untrained level 11.1 ≈ ln 50k), then its original curve (as the cluster test
tests/test_cluster_level.py splices the same export)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import tscope

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"
PYTHIA = REALDATA / "pythia_wandb_export" / "70m-seed3_0ydn3v9s.csv"
pytestmark = pytest.mark.skipif(not PYTHIA.is_file(), reason="../shared/realdata is absent")
RESUME, CRASH, RELEARN = 40_000, 41_000, 26_000


def test_weights_lost_at_a_resume_of_a_real_export_is_a_critical_resume(tmp_path: Path) -> None:
    import pandas as pd

    table = pd.read_csv(PYTHIA)
    steps, loss = table["step"].to_numpy(), table["loss"].to_numpy()
    relogged = loss[steps > RESUME].copy()
    relogged[:RELEARN] = loss[:RELEARN]
    path = tmp_path / "70m-resumed.csv"
    pd.DataFrame(
        {
            "step": np.concatenate([steps[steps <= CRASH], steps[steps > RESUME]]),
            "loss": np.concatenate([loss[steps <= CRASH], relogged]),
        }
    ).to_csv(path, index=False)
    case = tscope.analyze(path, read_weights=False)
    first = case.findings[0]
    assert first.category == "resume_discontinuity" and first.severity == "critical"
    assert first.step == RESUME + 1 and first.evidence["weights_lost"] is True
    assert first.evidence["untrained_level"] == pytest.approx(loss[0], rel=1e-6)
    assert case.summary.card.cause.category == "resume_discontinuity"
    # The 26k-step re-learning is a setback, never "recovered" like a spike.
    spikes = [f for f in case.findings if f.category == "loss_spike" and f.step == RESUME + 3]
    assert spikes and "setback" in spikes[0].message
