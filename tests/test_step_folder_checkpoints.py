"""A loop's own checkpoint folders (tscope/ingest/checkpoints/step_folder.py): `step-00200/` with
model.safetensors and optimizer.pt. A blind set's plain loop, session 27, resumed at 600 with a
fresh AdamW; no reader claimed its folders, and the reset went unseen. The step comes from the
folder's name, never from the optimizer's counter (which the reset rule compares with it)."""

from __future__ import annotations

from pathlib import Path

import torch
from safetensors.torch import save_file

import tscope
from tests.tiny_loops import classifier_loop
from tscope.ingest.checkpoints.registry import find_checkpoints
from tscope.ingest.checkpoints.step_folder import StepFolderReader


def _loop(root: Path, reset_at: int | None) -> None:
    def save(step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        folder = root / "checkpoints" / f"step-{step:05d}"
        folder.mkdir(parents=True)
        weights = {name: value.contiguous() for name, value in model.state_dict().items()}
        save_file(weights, folder / "model.safetensors")
        torch.save(optimizer.state_dict(), folder / "optimizer.pt")

    classifier_loop(root, lambda params: torch.optim.AdamW(params, lr=3e-3), save, reset_at)


def test_step_folders_are_checkpoints_at_their_named_step(tmp_path: Path) -> None:
    _loop(tmp_path, reset_at=None)
    found = find_checkpoints(tmp_path)
    assert [shown for _, _, shown in found] == [
        f"checkpoints/step-{step:05d}" for step in (100, 200, 300, 400)
    ]
    assert all(isinstance(reader, StepFolderReader) for reader, _, _ in found)
    case = tscope.analyze(tmp_path)
    assert [c.step for c in case.checkpoints] == [100, 200, 300, 400]
    assert not [f for f in case.findings if f.category == "optimizer_state_reset"]


def test_a_fresh_optimizer_at_a_resume_is_found_in_step_folders(tmp_path: Path) -> None:
    _loop(tmp_path, reset_at=200)
    case = tscope.analyze(tmp_path)
    reset = next(f for f in case.findings if f.category == "optimizer_state_reset")
    assert reset.step == 201 and reset.severity == "critical"


def test_a_run_root_named_like_a_step_is_not_one_checkpoint(tmp_path: Path) -> None:
    """A folder holding folders is a run, not a checkpoint: its own checkpoints stay visible."""
    root = tmp_path / "step-1000"
    root.mkdir()
    _loop(root, reset_at=None)
    save_file({"w": torch.zeros(2)}, root / "model.safetensors")  # final weights at the top
    assert not StepFolderReader().can_open(root)
    shown = [shown for _, _, shown in find_checkpoints(root)]
    assert "checkpoints/step-00100" in shown
