"""The vocabulary size from the checkpoints' token embedding when no config names it.

A plain loop that saves `model.state_dict()` every few hundred steps and logs loss and LR names
its vocabulary nowhere but in the embedding's shape. A blind set's byte-level OPT run (session
28) trained at 3e-6 from 5.42 to 5.11 nats in 900 steps (92% of ln 256) and was called healthy:
without the vocabulary, the start (5.4 nats) could not say "from scratch", and nothing judged the
LR. The same loss with the embedding's 256 rows at hand is a from-scratch run that never left its
untrained level.
"""

from __future__ import annotations

import csv
import math
from pathlib import Path

import numpy as np
import torch
from transformers import OPTConfig, OPTForCausalLM

import tscope

VOCAB = 256
STEPS = 600


def _byte_opt() -> OPTForCausalLM:
    """A one-layer OPT over bytes: its embedding's 256 rows are the vocabulary."""
    torch.manual_seed(0)
    config = OPTConfig(
        vocab_size=VOCAB,
        hidden_size=16,
        word_embed_proj_dim=16,
        ffn_dim=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        max_position_embeddings=64,
    )
    return OPTForCausalLM(config)


def _run(folder: Path, with_checkpoints: bool) -> Path:
    folder.mkdir()
    rng = np.random.default_rng(0)
    with (folder / "metrics.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", "loss", "lr"])
        for step in range(1, STEPS + 1):
            lr = 3e-6 * min(1.0, step / 50) * (0.5 + 0.5 * math.cos(math.pi * step / STEPS))
            loss = 5.1 + 0.35 * math.exp(-step / 300) + 0.02 * rng.standard_normal()
            writer.writerow([step, f"{loss:.4f}", f"{lr:.3e}"])
    if with_checkpoints:
        model = _byte_opt()
        for step in (300, STEPS):
            with torch.no_grad():
                for parameter in model.parameters():
                    parameter.add_(1e-4 * torch.randn_like(parameter))
            torch.save(model.state_dict(), folder / f"model_{step}.pt")
    return folder


def test_the_embedding_rows_give_the_vocabulary_and_the_untrained_level(tmp_path: Path) -> None:
    case = tscope.analyze(_run(tmp_path / "run", with_checkpoints=True))
    low = [f for f in case.findings if f.category == "lr_too_low"]
    assert [f.severity for f in low] == ["warning"]
    assert "the rows of model.decoder.embed_tokens.weight" in low[0].message
    assert low[0].evidence["still_untrained"] is True


def test_without_checkpoints_the_same_log_is_not_judged_from_scratch(tmp_path: Path) -> None:
    case = tscope.analyze(_run(tmp_path / "run", with_checkpoints=False))
    assert not [f for f in case.findings if f.severity in ("critical", "warning")]


def _resumed_without_weights(folder: Path) -> Path:
    """A loop whose log file starts at step 1000 (an earlier restart opened a new file): its
    first point, 2.45, is far below ln 256. It restarts after its checkpoint of step 2000 with a
    fresh model: the loss is back at ~5.3 (ln 256 = 5.55), more than twice the first logged
    loss, and re-learns from there."""
    folder.mkdir()
    rng = np.random.default_rng(1)
    with (folder / "metrics.csv").open("w", newline="") as handle:
        writer = csv.writer(handle)
        writer.writerow(["step", "loss", "lr"])
        for step in range(1000, 3001, 20):
            trained = 2.0 + 0.45 * math.exp(-(step - 1000) / 300)
            fresh = 2.0 + (math.log(VOCAB) - 2.0) * math.exp(-(step - 2000) / 300)
            loss = (trained if step <= 2000 else fresh) + 0.01 * rng.standard_normal()
            writer.writerow([step, f"{loss:.4f}", "3.000e-04"])
    model = _byte_opt()
    for step in (1500, 2000, 2500, 3000):
        with torch.no_grad():
            for parameter in model.parameters():
                parameter.add_(1e-3 * torch.randn_like(parameter))
        torch.save(model.state_dict(), folder / f"model_{step}.pt")
    return folder


def test_weights_lost_at_a_resume_are_judged_against_ln_of_the_embedding_rows(
    tmp_path: Path,
) -> None:
    """The untrained level is ln 256 from the checkpoints, not the first logged loss (2.45): the
    return to 5.3 is lost weights at the checkpoint of step 2000, not a blow-up past twice the
    run's first loss."""
    case = tscope.analyze(_resumed_without_weights(tmp_path / "run"))
    lost = [f for f in case.findings if f.category == "resume_discontinuity"]
    assert [(f.severity, f.step) for f in lost] == [("critical", 2020)]
    assert "ln(vocab 256, the rows of model.decoder.embed_tokens.weight" in lost[0].message
    assert f"({math.log(VOCAB):.2f}" in lost[0].message
