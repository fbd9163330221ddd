"""lr_too_low when the schedule ends early: a plain loop with gradient accumulation 4 that steps
its scheduler once per micro-batch reaches the end of a schedule sized for max_steps at a
quarter of the run, and trains nothing after (a planted-cause hunt of session 25: logged as
healthy). A schedule that reaches its floor at the last step is the schedule ending on time."""

from __future__ import annotations

import csv

import pytest
import torch
from transformers import get_linear_schedule_with_warmup

from tscope.pipeline import analyze_run

MAX_STEPS, ACCUMULATION = 200, 4


def _train(out, scheduler_per_micro_batch: bool) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(32, 16), torch.nn.Linear(16, 32))
    optimizer = torch.optim.AdamW(model.parameters(), lr=2e-3)
    scheduler = get_linear_schedule_with_warmup(optimizer, 10, MAX_STEPS)
    data = torch.randint(0, 32, (MAX_STEPS * ACCUMULATION, 8))
    rows = []
    for step in range(1, MAX_STEPS + 1):
        total = 0.0
        for micro in range(ACCUMULATION):
            batch = data[(step - 1) * ACCUMULATION + micro]
            logits = model(batch[:-1])
            loss = torch.nn.functional.cross_entropy(logits, batch[1:]) / ACCUMULATION
            loss.backward()
            total += float(loss)
            if scheduler_per_micro_batch:
                scheduler.step()
        rows.append({"step": step, "loss": total, "lr": optimizer.param_groups[0]["lr"]})
        optimizer.step()
        optimizer.zero_grad()
        if not scheduler_per_micro_batch:
            scheduler.step()
    with open(out / "metrics.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["step", "loss", "lr"])
        writer.writeheader()
        writer.writerows(rows)


@pytest.mark.filterwarnings("ignore::UserWarning")  # scheduler.step() before optimizer.step()
def test_a_schedule_that_ends_at_a_quarter_of_the_run_is_reported(tmp_path):
    _train(tmp_path, scheduler_per_micro_batch=True)
    case, _ = analyze_run(str(tmp_path))
    found = [f for f in case.findings if f.category == "lr_too_low" and f.severity == "warning"]
    assert found and 50 <= found[0].step <= 55
    assert "The schedule ended early" in found[0].message


def test_a_schedule_that_ends_on_time_is_not(tmp_path):
    _train(tmp_path, scheduler_per_micro_batch=False)
    case, _ = analyze_run(str(tmp_path))
    assert not [f for f in case.findings if f.category == "lr_too_low"]
