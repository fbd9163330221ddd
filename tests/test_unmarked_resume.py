"""Weights lost at a resume the log does not record (analyzers/explainers/resume.py,
`_unmarked_weights_lost`): a loop that appends to its log after a restart leaves no rewind, so
the saved checkpoints are the candidate resume points. Planted-cause hunt, session 26: a plain
loop and a real Trainer resume, both re-initializing the model, were "cause undetermined" and
"not a resume"."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tscope.pipeline import analyze_run

STEPS, SAVED = 160, 80


def train(folder: Path, lose_weights: bool) -> Path:
    """A classifier trained by a plain loop that logs JSONL and saves nanoGPT-style checkpoints
    every 40 steps; it "restarts" after step SAVED, from that checkpoint's optimizer, with the
    weights either restored or a fresh model's."""
    torch.manual_seed(0)
    data = torch.randn(2048, 16)
    labels = (data[:, :4].argmax(1) + 4 * (data[:, 4] > 0)).long()

    def fresh() -> torch.nn.Module:
        return torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))

    model = fresh()
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    folder.mkdir()
    with (folder / "metrics.jsonl").open("w") as log:
        for step in range(1, STEPS + 1):
            if step == SAVED + 1:  # the restart
                saved = torch.load(folder / f"ckpt_{SAVED:06d}.pt", weights_only=True)
                model = fresh() if lose_weights else model
                if not lose_weights:
                    model.load_state_dict(saved["model"])
                optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
                optimizer.load_state_dict(saved["optimizer"])
            batch = torch.randint(0, len(data), (64,))
            loss = torch.nn.functional.cross_entropy(model(data[batch]), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            lr = optimizer.param_groups[0]["lr"]
            log.write(json.dumps({"step": step, "loss": loss.item(), "lr": lr}) + "\n")
            if step % 40 == 0:
                state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
                torch.save({**state, "iter_num": step}, folder / f"ckpt_{step:06d}.pt")
    return folder


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("unmarked")
    return {
        "lost": train(root / "lost", lose_weights=True),
        "kept": train(root / "kept", lose_weights=False),
    }


def test_weights_lost_after_a_saved_checkpoint_are_the_headline(runs: dict[str, Path]) -> None:
    case = analyze_run(runs["lost"]).case
    headline = case.findings[0]
    assert headline.category == "resume_discontinuity"
    assert headline.severity == "critical"
    assert headline.step == SAVED + 1
    assert headline.evidence["checkpoint_step"] == SAVED
    assert headline.evidence["resume_recorded"] is False


def test_a_restart_that_restored_the_weights_is_not_called_a_resume(
    runs: dict[str, Path],
) -> None:
    case = analyze_run(runs["kept"]).case
    assert not [f for f in case.findings if f.category == "resume_discontinuity"]
    assert case.summary.status == "healthy"


def _resume_findings(disturbed_before: bool) -> list[str]:
    """A benchmark Trainer run's shape (trainer_gpt2-lr_jump_persistent-81): the loss falls 4.5 →
    3.2, a checkpoint at step 50, and the loss at 5-5.4 after it; with `disturbed_before` the LR
    jumped ×10 at 46 and the loss broke from 47 on (4.68, 4.12, 3.57), before the checkpoint."""
    from types import SimpleNamespace

    import numpy as np
    from synthetic import make_run

    from tscope.analyzers.base import Evidence
    from tscope.analyzers.explainers.resume import ResumeExplainer
    from tscope.model.metric_names import LEARNING_RATE, LOSS

    rng = np.random.default_rng(5)
    steps = np.arange(1, 81)
    loss = 3.2 + 1.3 * np.exp(-(steps - 1) / 8) + 0.03 * rng.standard_normal(80)
    lr = np.full(80, 1e-4)
    loss[49:] = 5.2 + 0.1 * rng.standard_normal(31)
    if disturbed_before:
        loss[46:49] = [4.68, 4.12, 3.57]
        lr[45:] = 1e-3
    run = make_run({LOSS: loss, LEARNING_RATE: lr})
    checkpoints = SimpleNamespace(steps=[25, 50], snapshots=[])
    evidence = Evidence(run, checkpoints=checkpoints)  # type: ignore[arg-type]
    return [f.category for f in ResumeExplainer().run(evidence)]


def test_a_loss_already_breaking_before_the_checkpoint_is_not_a_lost_resume() -> None:
    assert _resume_findings(disturbed_before=False) == ["resume_discontinuity"]
    assert _resume_findings(disturbed_before=True) == []
