"""Half a batch, a whole batch or one row of it corrupted: the rows are judged against the rows of
the neighbouring clean steps replayed in the same window, so the bad rows are found however many
they are (a robust z within the batch loses them once they are half of it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tscope.replay import replay
from tscope.replay.attribution import SampleAttribution, attribution_steps

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "fixtures" / "data" / "trainer"
ENTRY = ROOT / "fixtures" / "entries" / "trainer_fixtures.py"
SPIKE = 145
VOCAB = 96  # the fixture model's vocabulary (trainer_run_specs.py)


def _planted_entry(tmp_path: Path, rows: list[int]) -> Path:
    """The stable run's batches with `rows` of step SPIKE's batch replaced by random tokens, as
    planted.RecordingCollator corrupts corrupted_batch's."""
    entry = tmp_path / "planted_entry.py"
    entry.write_text(
        "import importlib.util\n"
        "import torch\n"
        f"spec = importlib.util.spec_from_file_location('fixture_entry', {str(ENTRY)!r})\n"
        "base = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(base)\n"
        "def batches(start_step):\n"
        "    for step, batch in enumerate(base.batches(start_step), start_step + 1):\n"
        f"        if step == {SPIKE}:\n"
        "            ids = batch['input_ids'].clone()  # (24, 64)\n"
        "            generator = torch.Generator().manual_seed(7)\n"
        f"            for row in {rows!r}:\n"
        f"                ids[row] = torch.randint(0, {VOCAB}, (ids.shape[1],), "
        "generator=generator)\n"
        "            batch = {'input_ids': ids, 'labels': ids.clone()}\n"
        "        yield batch\n"
    )
    return entry


@pytest.mark.parametrize(
    "rows",
    [list(range(0, 24, 2)), list(range(24)), [4], list(range(8, 16))],
    ids=["half_the_batch", "the_whole_batch", "one_row_of_24", "a_third_of_the_batch"],
)
def test_corrupted_rows_are_found_however_many_of_the_batch_they_are(monkeypatch, tmp_path, rows):
    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", "stable")
    attribution = SampleAttribution(attribution_steps(SPIKE))
    replay(
        RUNS / "stable",
        SPIKE,
        window=(-4, 0),
        entry=_planted_entry(tmp_path, rows),
        observers=[attribution],
    )
    flagged = [(s.step, s.index) for s in attribution.bad_samples()]
    assert flagged == [(SPIKE, row) for row in rows]  # and nothing in the clean steps before it
    assert attribution.bad_batches() == ((SPIKE,) if len(rows) == 24 else ())
    skips = attribution.skip_suggestion()
    assert skips.batches  # the restart's skip list names the batch


def test_the_whole_bad_batch_is_reported_as_a_bad_batch(monkeypatch, tmp_path):
    from tscope.replay_pipeline import investigate

    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", "stable")
    found = investigate(
        RUNS / "stable", SPIKE, _planted_entry(tmp_path, list(range(24))), window=(-4, 0)
    )
    finding = next(f for f in found.findings if f.category == "bad_batch")
    assert finding.evidence["whole_batch"] is True
    assert f"Step {SPIKE}'s whole batch is bad" in finding.message
    assert found.result.skip_suggestion is not None
