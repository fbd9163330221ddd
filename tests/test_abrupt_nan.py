"""A loss that goes from its level to NaN in one step, with no climb before it, is a non-finite
value entering that step, not an instability building up. A blind set's W&B loop (session 29)
with NaN written into one attention weight at step 297 was headlined "train/loss diverged from
step 297" with the advice to restart with a lower peak learning rate. Real plain-torch loops
here, logging JSONL as many loops do."""

from __future__ import annotations

import json
import math
from pathlib import Path

import torch

from tscope.pipeline import analyze_run

STEPS, BROKEN = 80, 50


def _train(folder: Path, nan_at: int | None = None, lr_growth: float = 1.0) -> Path:
    torch.manual_seed(0)
    data = torch.randn(1024, 16)
    labels = (data[:, :4].argmax(1) + 4 * (data[:, 4] > 0)).long()
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(), torch.nn.Linear(64, 8))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    folder.mkdir()
    with (folder / "metrics.jsonl").open("w") as log:
        for step in range(1, STEPS + 1):
            if step == nan_at:
                with torch.no_grad():
                    model[0].weight[3, 5] = float("nan")
            if step > STEPS // 2:
                for group in optimizer.param_groups:
                    group["lr"] *= lr_growth
            batch = torch.randint(0, len(data), (64,))
            loss = torch.nn.functional.cross_entropy(model(data[batch]), labels[batch])
            optimizer.zero_grad()
            loss.backward()
            norm = torch.nn.utils.clip_grad_norm_(model.parameters(), 1e9)
            optimizer.step()
            row = {"step": step, "loss": loss.item(), "grad_norm": norm.item()}
            row["lr"] = optimizer.param_groups[0]["lr"]
            log.write(json.dumps({k: v if math.isfinite(v) else "NaN" for k, v in row.items()}))
            log.write("\n")
    return folder


def test_nan_out_of_a_healthy_loss_is_headlined_as_such(tmp_path: Path) -> None:
    case, _ = analyze_run(str(_train(tmp_path / "run", nan_at=BROKEN)))
    card = case.summary.card
    assert card is not None
    assert card.what == f"train/loss became NaN/Inf at step {BROKEN} with no climb before it"
    assert card.cause.category == "undetermined"
    assert "a non-finite value entering that step" in case.summary.verdict
    headline = next(f for f in case.findings if f.id == card.headline_id)
    assert f"tscope replay --around {BROKEN}" in headline.suggestion
    assert "lower peak learning rate" not in headline.suggestion


def test_a_climb_into_nan_still_reads_as_a_divergence(tmp_path: Path) -> None:
    """The LR grows ×1.5 a step from step 40: the loss climbs for a few steps, then NaN. The
    cause is the ramp, which acts first, not "an LR too high" at the blow-up it led to (a blind
    set's ExponentialLR ×1.022 from step 100 read "LR too high" dated 319, session 29)."""
    case, _ = analyze_run(str(_train(tmp_path / "run", lr_growth=1.5)))
    card = case.summary.card
    assert card is not None
    assert "no climb before it" not in card.what
    assert card.cause.category == "lr_ramp"
    divergence = [f for f in case.findings if f.category == "loss_divergence"]
    assert divergence and divergence[0].evidence["abrupt_nonfinite"] is False
