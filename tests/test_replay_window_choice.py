"""Where a replay starts and what it refuses, as a new user met them on real Trainer runs:

- the default window (5 steps before --around) was refused whenever the run's only checkpoint
  before the spike sat 1–4 steps before it, common with `save_steps`; it now starts right after
  that checkpoint and the case says so (an explicit --window is replayed as asked, or refused);
- "past the end" named step 121 for a run whose last update and checkpoint are step 120;
- `--what-if from=STEP` resolving to the checkpoint the replay itself starts from fed the same
  state the same batches and concluded "the data is bad whatever the state": refused before any
  replay, naming the checkpoints that would answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from tscope.cli import app
from tscope.errors import UsageError
from tscope.ingest.inputs import ReadOptions, read_inputs
from tscope.replay.api import DEFAULT_WINDOW
from tscope.replay.select import (
    check_window_end,
    replayable_checkpoints,
    window_after_checkpoint,
)

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "fixtures" / "data" / "trainer"
ENTRY = ROOT / "fixtures" / "entries" / "trainer_fixtures.py"
runner = CliRunner()


def test_the_default_window_starts_after_a_checkpoint_just_before_the_spike() -> None:
    run = RUNS / "lr_jump"  # checkpoints at 120, 180, 240
    window, note = window_after_checkpoint(replayable_checkpoints(run), 123, DEFAULT_WINDOW)
    assert window == (-2, DEFAULT_WINDOW[1])  # steps 121..128
    assert note is not None and "step 121" in note and "checkpoint-120" in note


def test_a_window_that_a_checkpoint_already_precedes_is_kept() -> None:
    available = replayable_checkpoints(RUNS / "lr_jump")
    assert window_after_checkpoint(available, 151, DEFAULT_WINDOW) == (DEFAULT_WINDOW, None)
    # Nothing before the first checkpoint to start from: left for choose_checkpoint to refuse.
    assert window_after_checkpoint(available, 110, DEFAULT_WINDOW) == (DEFAULT_WINDOW, None)


def test_past_the_end_names_the_runs_last_step() -> None:
    run_dir = RUNS / "lr_jump"
    run = read_inputs([run_dir], ReadOptions(read_weights=False)).run
    last = max(c.step for c in replayable_checkpoints(run_dir))
    with pytest.raises(UsageError) as refused:
        check_window_end(run_dir, 10_000, replayable_checkpoints(run_dir), run)
    assert f"step is {max(last, run.last_step or 0)}." in str(refused.value)
    assert f"step is {last + 1}." not in str(refused.value)


def test_a_what_if_from_the_replays_own_checkpoint_is_refused_before_any_replay(
    tmp_path: Path,
) -> None:
    # --around 145: the replay starts from checkpoint-120; from=130 restores checkpoint-120 too.
    result = runner.invoke(
        app,
        [
            "replay",
            str(RUNS / "corrupted_batch"),
            "--around",
            "145",
            "--entry",
            str(ENTRY),
            "--what-if",
            "from=130",
            "--out",
            str(tmp_path / "case"),
        ],
    )
    assert result.exit_code == 2, result.output
    assert "the checkpoint the replay itself starts from" in result.output
    assert "Pick a step before 120 (checkpoints at steps 60)." in result.output
    assert "Traceback" not in result.output
    assert not (tmp_path / "case").exists()
