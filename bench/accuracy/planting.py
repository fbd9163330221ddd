"""The data side of the planted causes, shared by every producer (torch only, no global RNG).

Batches are counted in micro-batches ("calls", from 1): optimizer step k consumes calls
(k-1)·A+1 … k·A with gradient accumulation A. A bad batch corrupts rows of step k's calls; repeated
data feeds the calls of step s (or of s and s+1) again for `length` steps.
"""

from __future__ import annotations

import random

import torch
from spec import BAD_BATCH, FROZEN_LAYER, REPEATED_DATA, RunSpec


def corrupted_rows(spec: RunSpec) -> dict[int, list[int]]:
    """{call: in-micro-batch row indices to replace by random tokens} for a bad batch."""
    if spec.cause != BAD_BATCH:
        return {}
    plant = spec.plant
    rows = random.Random(int(plant["generator_seed"])).sample(
        range(spec.batch_size * spec.grad_accum), int(plant["rows"])
    )
    first_call = (int(plant["step"]) - 1) * spec.grad_accum + 1
    by_call: dict[int, list[int]] = {}
    for row in sorted(rows):
        by_call.setdefault(first_call + row // spec.batch_size, []).append(row % spec.batch_size)
    return by_call


def random_tokens(
    input_ids: torch.Tensor, rows: list[int], seed: int, vocab_size: int
) -> torch.Tensor:
    """`input_ids` (batch, block) with `rows` replaced by uniformly random token ids."""
    generator = torch.Generator().manual_seed(seed)
    corrupted = input_ids.clone()
    for row in rows:
        corrupted[row] = torch.randint(0, vocab_size, (input_ids.shape[1],), generator=generator)
    return corrupted


def repeated_source(spec: RunSpec, call: int) -> int | None:
    """The earlier call whose batch `call` repeats, or None when it gets fresh data."""
    if spec.cause != REPEATED_DATA:
        return None
    first_step, distinct = int(spec.plant["step"]), int(spec.plant["distinct_batches"])
    step = (call - 1) // spec.grad_accum + 1
    if not first_step + distinct <= step < first_step + int(spec.plant["length"]):
        return None
    offset = (step - first_step) % distinct
    return (first_step + offset - 1) * spec.grad_accum + (call - 1) % spec.grad_accum + 1


def frozen_prefix(spec: RunSpec) -> str | None:
    """The parameter-name prefix of the block the frozen-layer cause stops training."""
    if spec.cause != FROZEN_LAYER:
        return None
    layer = int(spec.plant["layer"])
    blocks = {  # bench/ood's fourth block trains other Trainer model families
        "llama": "model.layers",
        "qwen2": "model.layers",
        "mistral": "model.layers",
        "phi": "model.layers",
        "gpt_neox": "gpt_neox.layers",
        "opt": "model.decoder.layers",
    }
    return f"{blocks.get(spec.model, 'transformer.h')}.{layer}."


def freeze(model: torch.nn.Module, prefix: str) -> list[str]:
    """Stop training every parameter under `prefix` (no gradient: AdamW skips it, weight decay
    included, so the tensors stay bit-identical); returns their names."""
    names = []
    for name, parameter in model.named_parameters():
        if name.startswith(prefix):
            parameter.requires_grad_(False)
            parameter.grad = None
            names.append(name)
    if not names:
        raise ValueError(f"no parameter under {prefix!r}")
    return names


class PlantedBatches:
    """Applies the data causes to each built micro-batch, in build order; the caller passes the
    batch's token ids and gets the ones to train on. Records what it did for the ground truth."""

    def __init__(self, spec: RunSpec, vocab_size: int) -> None:
        self.spec = spec
        self.vocab_size = vocab_size
        self.calls = 0
        self.rows = corrupted_rows(spec)
        self.kept: dict[int, torch.Tensor] = {}
        self.log: list[str] = []

    def __call__(self, input_ids: torch.Tensor) -> torch.Tensor:
        self.calls += 1
        call = self.calls
        source = repeated_source(self.spec, call)
        if source is not None and source in self.kept:
            input_ids = self.kept[source].clone()
        elif self.spec.cause == REPEATED_DATA and self._is_repeated_later(call):
            self.kept[call] = input_ids.clone()
        if call in self.rows:
            seed = int(self.spec.plant["generator_seed"]) + call
            input_ids = random_tokens(input_ids, self.rows[call], seed, self.vocab_size)
            self.log.append(f"call {call}: rows {self.rows[call]} replaced by random tokens")
        return input_ids

    def _is_repeated_later(self, call: int) -> bool:
        first_step = int(self.spec.plant["step"])
        step = (call - 1) // self.spec.grad_accum + 1
        return first_step <= step < first_step + int(self.spec.plant["distinct_batches"])
