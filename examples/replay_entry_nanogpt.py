"""Replay entry file for a nanoGPT-style run: the one `tscope demo` trains (tscope/demo/train.py).

    tscope demo --out demo-run
    tscope replay demo-run --around 151 --entry examples/replay_entry_nanogpt.py

or from Python:

    from tscope.replay import replay
    result = replay("demo-run", around=151, entry="examples/replay_entry_nanogpt.py")
    print(result.fidelity.reproduced, result.fidelity.max_rel_loss_diff)

Copy it next to your own training script and change the three functions. What they must match:

- build_model(config): `config` is the checkpoint's `model_args` (nanoGPT saves them), so the
  model is built exactly as the run built it.
- batches(start_step): the batches of optimizer steps start_step+1, start_step+2, ... with
  steps numbered as the run logged them (nanoGPT's iter_num, from 0). The demo draws the batch of
  step k from a generator seeded by (seed, k) (`Corpus.batch`), so any step can be rebuilt
  without replaying the ones before. nanoGPT's own get_batch draws from the global torch RNG,
  which its checkpoints do not save: a replay of stock nanoGPT needs batches made this way.
- loss_fn(model, batch): per-sample losses whose mean is the logged training loss. nanoGPT's
  loss is the mean token cross-entropy over the batch; every row has the same token count, so
  the mean of the per-row means is that loss.

The demo's seed is 0 unless it was run with another one: set TSCOPE_DEMO_SEED to match.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import torch
import torch.nn.functional as F

from tscope.demo.corpus import load_corpus
from tscope.demo.tiny_gpt import TinyGPT, TinyGPTConfig
from tscope.demo.train import TrainConfig

SEED = int(os.environ.get("TSCOPE_DEMO_SEED", "0"))
# The demo trains with TrainConfig's defaults for the batch shape.
TRAINING = TrainConfig(out_dir="demo", max_iters=0, seed=SEED)


def build_model(config: dict[str, Any] | None) -> torch.nn.Module:
    if config is None:
        raise ValueError("the checkpoint holds no model_args")
    return TinyGPT(TinyGPTConfig(**config))


def batches(start_step: int) -> Iterator[dict[str, torch.Tensor]]:
    corpus = load_corpus()
    step = start_step + 1
    while True:  # the replay stops at the end of its window
        inputs, targets = corpus.batch(
            "train",
            index=step,
            seed=SEED,
            batch_size=TRAINING.batch_size,
            block_size=TRAINING.block_size,
        )  # (B, T), (B, T)
        yield {"inputs": inputs, "targets": targets}
        step += 1


def loss_fn(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    logits, _ = model(batch["inputs"])  # (B, T, vocab)
    targets = batch["targets"]  # (B, T)
    token_losses = F.cross_entropy(
        logits.reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none"
    )  # (B * T,)
    return token_losses.view(targets.shape).mean(dim=1)  # (B,)
