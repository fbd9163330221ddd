"""An optimizer's step counters are read whether or not its entries could be named
(tscope/ingest/checkpoints/optimizer_mapping.py, OptimizerState.largest_step). A fresh
verification run (session 26): a plain loop's Adagrad, reset at a resume at 1200, held counters
of 400 at checkpoint 1600; its entries were not mapped to names, so no counter was read and the
reset went unseen."""

from __future__ import annotations

from pathlib import Path

import torch

import tscope
from tests.tiny_loops import classifier_loop
from tscope.ingest.checkpoints.optimizer_mapping import map_optimizer_state


def test_counters_of_entries_that_cannot_be_named_are_still_read():
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    optimizer = torch.optim.Adagrad(model.parameters(), lr=0.1)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(5, 4)).sum().backward()
        optimizer.step()
    state, how = map_optimizer_state(optimizer.state_dict(), orders=[], rules=[])
    assert how == "not mapped" and state.per_param == {}
    assert state.largest_step == 3.0


def _adagrad_loop_reset_at_resume(folder: Path) -> None:
    """A plain loop: Adagrad, checkpoints every 100 steps; preempted at 200 and resumed from
    ckpt_200.pt with a fresh optimizer (the weights restored)."""

    def save(step: int, model: torch.nn.Module, optimizer: torch.optim.Optimizer) -> None:
        state = {"model": model.state_dict(), "optimizer": optimizer.state_dict()}
        torch.save({**state, "step": step}, folder / f"ckpt_{step}.pt")

    classifier_loop(folder, lambda params: torch.optim.Adagrad(params, lr=0.05), save, 200)


def test_a_reset_is_dated_at_the_fresh_optimizers_first_update(tmp_path: Path) -> None:
    """Counter 100 at checkpoint 300: the fresh optimizer made updates 201-300, so the reset is
    dated 201 and ckpt_200.pt (the resume's own checkpoint, whose state was whole) is the restart
    point; dated 200, the card skipped it for ckpt_100.pt. Not Adam: no "Adam's" counter."""
    _adagrad_loop_reset_at_resume(tmp_path)
    case = tscope.analyze(tmp_path)
    reset = next(f for f in case.findings if f.category == "optimizer_state_reset")
    assert reset.step == 201 and reset.severity == "critical"
    assert "Adam" not in reset.message and "the optimizer's step counter is 100" in reset.message
    card = case.summary.card
    assert card is not None and card.restart is not None
    assert card.restart.path.endswith("ckpt_200.pt")
