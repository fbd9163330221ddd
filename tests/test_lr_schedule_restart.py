"""A scheduler rebuilt at a resume instead of restored starts its warm-up and decay over: the LR
drops mid-decay to the warm-up's first value and ramps back to the first peak. Two hunts of
session 25 found it read as healthy. A warm restart by design (cosine with hard restarts) starts
each cycle from the previous one's floor and jumps to the peak: no warning."""

from __future__ import annotations

import csv

import pytest
import torch
from transformers import (
    get_cosine_schedule_with_warmup,
    get_cosine_with_hard_restarts_schedule_with_warmup,
)

from tscope.pipeline import analyze_run

STEPS, RESUME = 400, 200


def _train(out, schedule: str) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(32, 16), torch.nn.Linear(16, 32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)

    def make():
        if schedule == "restarts":
            return get_cosine_with_hard_restarts_schedule_with_warmup(optimizer, 20, STEPS, 2)
        return get_cosine_schedule_with_warmup(optimizer, 20, STEPS)

    scheduler = make()
    data = torch.randint(0, 32, (STEPS, 16))
    rows = []
    for step in range(1, STEPS + 1):
        if step == RESUME + 1 and schedule == "rebuilt":
            scheduler = make()  # the bug: a fresh scheduler, its state not loaded
        logits = model(data[step - 1][:-1])
        loss = torch.nn.functional.cross_entropy(logits, data[step - 1][1:])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        rows.append({"step": step, "loss": float(loss), "lr": optimizer.param_groups[0]["lr"]})
        scheduler.step()
    with open(out / "metrics.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["step", "loss", "lr"])
        writer.writeheader()
        writer.writerows(rows)


def _jumps(path):
    case, _ = analyze_run(str(path))
    return [f for f in case.findings if f.category == "lr_schedule_jump"]


def test_a_schedule_that_starts_over_mid_decay_is_a_warning(tmp_path):
    _train(tmp_path, "rebuilt")
    found = [f for f in _jumps(tmp_path) if f.severity == "warning"]
    assert found and RESUME <= found[0].step <= RESUME + 2
    assert "schedule started over" in found[0].message


@pytest.mark.parametrize("schedule", ["restored", "restarts"])
def test_a_schedule_that_runs_as_configured_is_not(tmp_path, schedule):
    _train(tmp_path, schedule)
    assert not [f for f in _jumps(tmp_path) if f.severity != "info"]
