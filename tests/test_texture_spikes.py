"""A spike in a run that bumps all the time warns only when it stands out from the run's own bumps
(analyzers/explainers/spikes.py TEXTURE_OUTLIER_FACTOR, measured on the healthy real logs)."""

from __future__ import annotations

from pathlib import Path

import pytest

import tscope

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"
pytestmark = pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")
MODDED = REALDATA / "modded_nanogpt"
FP4 = MODDED / "more_runs" / "2024-11-14_QuantizedFP4__932bbe0e-41c3-4a5b-94bd-4ea3350909bd.csv"
UNTIE = MODDED / "more_runs" / "2024-11-03_UntieEmbed__d6b50d71-f419-4d26-bb39-a60d55ae7a04.csv"


def _alerts(case):  # type: ignore[no-untyped-def]
    return [f for f in case.findings if f.severity in ("warning", "critical")]


def test_the_largest_of_a_spiky_real_runs_83_bumps_is_no_warning() -> None:
    """QuantizedFP4: a one-step 3.17 → 6.28 at 14257 among 83 routine bumps; it is 3.26× their
    median magnitude, inside the healthy runs' range (up to 3.26×), and is named in the run's
    recurring-spikes note instead."""
    case = tscope.analyze(FP4, read_weights=False)
    assert _alerts(case) == []
    recurring = [f for f in case.findings if f.category == "recurring_loss_spikes"]
    assert recurring and "at step 14257" in recurring[0].message
    assert recurring[0].evidence["max_excess_nats"] == pytest.approx(3.1089, abs=1e-3)


def test_a_loss_doubling_planted_in_a_spiky_real_run_still_warns(tmp_path: Path) -> None:
    import pandas as pd

    table = pd.read_csv(UNTIE)
    rows = table.index[table["step"] == 2500]
    assert len(rows) == 1 and pd.notna(table.loc[rows[0], "train_loss"])
    table.loc[rows[0], "train_loss"] *= 2.0
    path = tmp_path / UNTIE.name
    table.to_csv(path, index=False)
    case = tscope.analyze(path, read_weights=False)
    spikes = [f for f in _alerts(case) if f.category == "loss_spike"]
    assert [f.step for f in spikes] == [2500]
