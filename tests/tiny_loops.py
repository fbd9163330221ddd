"""A plain training loop small enough for a test: a classifier of random points, a CSV log, and a
checkpoint written by `save` every 100 steps; `reset_at` replaces the optimizer by a fresh one
after that step (a resume that restored the weights but not the optimizer)."""

from __future__ import annotations

from collections.abc import Callable, Iterable
from pathlib import Path

import torch

Save = Callable[[int, torch.nn.Module, torch.optim.Optimizer], None]
MakeOptimizer = Callable[[Iterable[torch.nn.Parameter]], torch.optim.Optimizer]


def classifier_loop(
    root: Path, make_optimizer: MakeOptimizer, save: Save, reset_at: int | None, steps: int = 400
) -> None:
    torch.manual_seed(0)
    inputs, targets = torch.randn(512, 8), torch.randint(0, 4, (512,))
    model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))
    optimizer = make_optimizer(model.parameters())
    rows = ["step,loss"]
    for step in range(1, steps + 1):
        batch = torch.randint(0, 512, (32,))
        loss = torch.nn.functional.cross_entropy(model(inputs[batch]), targets[batch])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        rows.append(f"{step},{loss.item():.5f}")
        if step % 100 == 0:
            save(step, model, optimizer)
        if step == reset_at:
            optimizer = make_optimizer(model.parameters())
    (root / "metrics.csv").write_text("\n".join(rows) + "\n")
