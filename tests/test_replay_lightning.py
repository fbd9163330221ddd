"""A real Lightning run (lightning.pytorch.Trainer, CSVLogger, ModelCheckpoint step=N.ckpt), LR ×30
planted on updates 31-32, trained here: the replay restores the .ckpt through the safe loader
(state_dict into the entry's build_model, optimizer_states, lr_schedulers), reproduces the log,
names the cause, and the restart point is the newest checkpoint before the first affected update."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
ENTRY = ROOT / "fixtures" / "entries" / "lightning_run.py"

pytest.importorskip("lightning")

from tscope.replay.select import choose_checkpoint  # noqa: E402

SPIKE = 33
JUMP = 30  # the logged step whose update first uses the ×30 LR (Lightning logs the updates before)


@pytest.fixture(scope="module")
def lightning_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if str(ROOT / "fixtures") not in sys.path:  # at run time only, never at collection
        sys.path.append(str(ROOT / "fixtures"))
    from lightning_run import train_lightning_run

    return train_lightning_run(tmp_path_factory.mktemp("lightning") / "run")


@pytest.fixture(scope="module")
def investigated(lightning_run):  # type: ignore[no-untyped-def]
    from tscope.replay_pipeline import investigate

    return investigate(
        lightning_run, SPIKE, ENTRY, window=(-3, 3), what_ifs=["skip", "lr=0.05"], statistics=False
    )


def test_a_lightning_checkpoint_is_replayed_from_the_state_before_the_window(lightning_run):
    choice = choose_checkpoint(lightning_run, JUMP)
    assert choice.format == "lightning" and choice.shown == "checkpoints/step=30.ckpt"
    assert choice.first_step == JUMP  # global_step 30 is the state logged step 30 starts from


def test_the_replay_reproduces_the_lightning_log_and_names_the_state(investigated):
    result = investigated.result
    assert result.fidelity.reproduced
    assert result.fidelity.max_rel_loss_diff < 1e-5
    assert result.checkpoint_step == JUMP
    assert result.restore.optimizer and result.restore.lr_source == "log"
    assert any("holds no RNG state" in caveat for caveat in result.restore.caveats)
    effects = {o.name: o.effect for o in result.interventions}
    assert effects == {"skip": "kept", "lr": "removed"}
    assert result.cause == "state"


def test_the_restart_point_is_the_checkpoint_before_the_first_affected_update(investigated):
    from tscope.replay_case import case_with_replay

    case = case_with_replay(investigated, read_weights=False)
    restart = [s for s in case.summary.next_steps if s.startswith("Restart point")]
    assert restart and "`checkpoints/step=30.ckpt`" in restart[0], restart


def test_the_lightning_file_is_never_unpickled(lightning_run, monkeypatch):
    import torch

    from tscope.replay.files import CheckpointFiles

    def refuse(*args, **kwargs):  # type: ignore[no-untyped-def]
        if kwargs.get("weights_only") is False:
            raise AssertionError("torch.load with weights_only=False")
        return original(*args, **kwargs)

    original = torch.load
    monkeypatch.setattr(torch, "load", refuse)
    files = CheckpointFiles(choose_checkpoint(lightning_run, JUMP))
    try:
        assert files.optimizer_state() is not None and files.scheduler_state() is not None
        assert "model.transformer.wte.weight" in files.weights()
        assert files.rng_state() == (None, "")
    finally:
        files.close()
