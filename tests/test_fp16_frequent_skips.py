"""A GradScaler that skips a large share of the steps after its start-up calibration is an fp16
problem, even when the scale never falls five times in a row: growth_interval=1 doubles the
scale after every good step, so it overflows again about every other step (a planted-cause hunt
of session 25: 190 of 383 steps skipped, read as "calibrating, then held")."""

from __future__ import annotations

import csv

import torch

from tscope.pipeline import analyze_run


def _train(out, growth_interval: int, steps: int = 300) -> int:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Embedding(64, 32), torch.nn.Linear(32, 64))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**32, growth_interval=growth_interval)
    data = torch.randint(0, 64, (steps, 16))
    rows, skipped = [], 0
    for step in range(1, steps + 1):
        with torch.autocast("cpu", dtype=torch.float16):
            logits = model(data[step - 1][:-1])
            loss = torch.nn.functional.cross_entropy(logits.float(), data[step - 1][1:])
        optimizer.zero_grad()
        scaler.scale(loss).backward()
        scaler.unscale_(optimizer)
        norm = torch.nn.utils.clip_grad_norm_(model.parameters(), float("inf")).item()
        scale = scaler.get_scale()
        scaler.step(optimizer)
        scaler.update()
        skipped += scaler.get_scale() < scale
        rows.append({"step": step, "loss": loss.item(), "grad_norm": norm, "loss_scale": scale})
    with open(out / "metrics.csv", "w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=["step", "loss", "grad_norm", "loss_scale"])
        writer.writeheader()
        writer.writerows(rows)
    return skipped


def test_a_scaler_skipping_every_other_step_is_reported(tmp_path):
    skipped = _train(tmp_path, growth_interval=1)
    assert skipped > 100  # the producer's own count: the premise of this test
    case, _ = analyze_run(str(tmp_path))
    found = [f for f in case.findings if f.category == "loss_scale_collapse"]
    assert found and found[0].severity == "warning"
    assert "were skipped for overflow" in found[0].message


def test_a_scaler_that_calibrated_and_held_is_a_note(tmp_path):
    _train(tmp_path, growth_interval=2000)
    case, _ = analyze_run(str(tmp_path))
    found = [f for f in case.findings if f.category == "loss_scale_collapse"]
    assert all(f.severity == "info" for f in found)
