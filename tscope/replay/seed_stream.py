"""Entry helper: rebuild stock nanoGPT's global RNG stream from its seed (its ckpt.pt saves none).

    from tscope.replay.seed_stream import NanoGPTDraws, nanogpt_batches

    DRAWS = NanoGPTDraws(seed=1337, gradient_accumulation_steps=1, eval_interval=20, eval_iters=4)

    def batches(start_step):
        return nanogpt_batches(DRAWS, start_step, get_batch, init_model=lambda: GPT(gptconf))

nanoGPT's train.py seeds the global torch RNG once (`torch.manual_seed(1337 + seed_offset)`) and
then draws from it in a fixed order: the model's init (`GPT(gptconf)`, init_from='scratch'), the
first `get_batch('train')`, and per iteration `estimate_loss()` when `iter_num % eval_interval ==
0` (eval_iters batches of 'train', then of 'val'), then one `get_batch('train')` after each
micro-step's forward (the last one prefetches the next iteration's first batch). `nanogpt_batches`
re-seeds, makes those draws up to the replayed step, and yields each step's micro-batches as the
run drew them. This rebuilds the stream exactly when nothing else draws from the global CPU
generator in between, in a count that depends on the data (`rebuildable` checks the saved config):

- possible: one process (rank r of DDP: seed 1337 + r); init_from='scratch' (a resumed segment
  re-seeds at its start: pass `resumed_at`); dropout 0 on CPU; any dropout on CUDA for the *data
  order* (CUDA dropout draws from the CUDA generator, not the CPU one);
- not possible: dropout > 0 on CPU (the masks draw from the same generator, between batches);
  bit-exact dropout masks on CUDA (the CUDA generator's position is not rebuilt: the data order
  is right, the masks are not); DataLoader workers (each worker's seed is drawn, and batches
  arrive in timing order); init_from='gpt2*' when the pretrained load draws differently;
  any other global draw (augmentation, sampling) the loop makes.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

SPLITS = ("train", "val")  # estimate_loss's order


@dataclass(frozen=True)
class NanoGPTDraws:
    seed: int = 1337  # 1337 + seed_offset (the DDP rank)
    gradient_accumulation_steps: int = 1
    eval_interval: int = 2000
    eval_iters: int = 200
    resumed_at: int = 0  # iter_num the run (re)started from: it re-seeds there


def rebuildable(config: Mapping[str, Any]) -> tuple[bool, str]:
    """Whether the saved nanoGPT `config` (ckpt.pt's) allows rebuilding the stream, and why."""
    dropout = config.get("dropout", 0.0)
    device = str(config.get("device", "cpu"))
    if isinstance(dropout, (int, float)) and dropout > 0 and not device.startswith("cuda"):
        return False, (
            f"dropout={dropout} on {device}: the masks draw from the same global generator "
            "between batches, so the stream cannot be rebuilt from the seed"
        )
    init_from = config.get("init_from", "scratch")
    if init_from not in ("scratch", "resume"):
        return False, f"init_from={init_from!r}: the pretrained load's draws are not modelled"
    if isinstance(dropout, (int, float)) and dropout > 0:
        return True, (
            f"dropout={dropout} on CUDA: the data order is rebuilt, the dropout masks are not "
            "(the CUDA generator's position is unknown)"
        )
    return True, "the global RNG's draws are init, eval and batch draws only"


def nanogpt_batches(
    draws: NanoGPTDraws,
    start_step: int,
    get_batch: Callable[[str], Any],
    init_model: Callable[[], Any] | None = None,
) -> Iterator[Any]:
    """The batches of iterations start_step+1, ... drawn from the re-seeded global RNG as
    train.py drew them: one batch per step, or a list of micro-batches under accumulation.
    `get_batch(split)` must be the run's own (it draws `torch.randint` from the global RNG);
    `init_model()` builds the model as the run did (its init draws come first)."""
    import torch

    torch.manual_seed(draws.seed)
    if init_model is not None:
        init_model()
    pending = get_batch("train")
    iter_num = draws.resumed_at
    steps = draws.gradient_accumulation_steps
    while True:
        if iter_num % draws.eval_interval == 0:
            for split in SPLITS:
                for _ in range(draws.eval_iters):
                    get_batch(split)
        micro = [pending]
        for index in range(steps):
            drawn = get_batch("train")
            if index < steps - 1:
                micro.append(drawn)
            else:
                pending = drawn
        if iter_num > start_step:
            yield micro if steps > 1 else micro[0]
        iter_num += 1
