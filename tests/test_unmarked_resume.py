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
            log.write(json.dumps({"step": step, "loss": loss.item(), "lr": 3e-3}) + "\n")
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
