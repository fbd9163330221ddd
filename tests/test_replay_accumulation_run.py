"""A real Trainer run of a tiny Llama under gradient accumulation 4, trained here, with 6 of the
24 rows of step 50 corrupted: the replay names the rows, and skipping them removes the spike by
its fraction (the spike line comes from the neighbouring steps, so the spike crosses it)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENTRY = ROOT / "fixtures" / "entries" / "accumulation_run.py"
CORRUPTED_STEP = 50  # fixtures/accumulation_run.py (imported lazily: fixtures/ joins sys.path
CORRUPTED_ROWS = (1, 4, 9, 14, 18, 23)  # only when a test runs, never at collection)


def _script():  # type: ignore[no-untyped-def]
    if str(ROOT / "fixtures") not in sys.path:
        sys.path.append(str(ROOT / "fixtures"))
    import accumulation_run

    assert accumulation_run.CORRUPTED_STEP == CORRUPTED_STEP
    assert tuple(accumulation_run.CORRUPTED_ROWS) == CORRUPTED_ROWS
    return accumulation_run


pytest.importorskip("transformers")


@pytest.fixture(scope="module")
def investigated(tmp_path_factory: pytest.TempPathFactory):  # type: ignore[no-untyped-def]
    from tscope.replay_pipeline import investigate

    run = _script().train_accumulation_run(
        tmp_path_factory.mktemp("ga") / "run", steps=55, save_steps=20
    )
    return investigate(run, CORRUPTED_STEP, ENTRY, what_ifs=["skip"])


def test_the_replay_reproduces_the_run_and_names_the_corrupted_rows(investigated):
    result = investigated.result
    assert result.fidelity.reproduced
    assert [(s.step, s.index) for s in result.bad_samples] == [
        (CORRUPTED_STEP, row) for row in CORRUPTED_ROWS
    ]


def test_the_spike_crosses_a_line_drawn_from_its_neighbours_and_skipping_removes_it(investigated):
    (skip,) = investigated.result.interventions
    assert skip.spike_line is not None and skip.reference_median is not None
    assert skip.baseline_peak_step == CORRUPTED_STEP
    assert skip.baseline_peak_loss > skip.spike_line  # a spike to remove
    # The level is the neighbours' (~3.29 here), not the run's early descent.
    assert skip.spike_line - skip.reference_median < 0.5 * (
        skip.baseline_peak_loss - skip.reference_median
    )
    at_spike = dict(skip.losses)[CORRUPTED_STEP]
    assert at_spike < skip.spike_line
    assert skip.effect == "removed" and skip.spike_removed
    assert skip.removed_fraction is not None and skip.removed_fraction >= 0.8
    assert investigated.result.cause == "data"
