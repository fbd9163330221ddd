"""Tiny real models and the replay's own loop (run_steps) for the tscope.replay.stats tests: GPT-2,
Llama, Mixtral, gpt-oss and tscope.demo's TinyGPT, fixed batches, and observers that capture what
each statistic measured."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch
import torch.nn.functional as F
from transformers import (
    GPT2Config,
    GPT2LMHeadModel,
    GptOssConfig,
    GptOssForCausalLM,
    LlamaConfig,
    LlamaForCausalLM,
    MixtralConfig,
    MixtralForCausalLM,
)

from tscope.demo.tiny_gpt import TinyGPT, TinyGPTConfig
from tscope.model.replay import ReplayStep
from tscope.replay import StepContext, StepObserver
from tscope.replay.determinism import replay_settings
from tscope.replay.entry import Entry
from tscope.replay.loop import LoopSettings, run_steps
from tscope.replay.losses import ENTRY_LOSS, MODEL_LOSS
from tscope.replay.lr_source import LrPlan

VOCAB = 96


ROWS, TIME = 4, 16


STEPS = 3


LR = 3e-3


MAX_GRAD_NORM = 1.0


REL = 1e-5  # the bar for norms that must add up


def gpt2(**overrides: Any) -> torch.nn.Module:
    config = GPT2Config(
        n_layer=2, n_embd=32, n_head=2, vocab_size=VOCAB, n_positions=64, bos_token_id=0,
        eos_token_id=0, **overrides,
    )  # fmt: skip
    return GPT2LMHeadModel(config)


def llama() -> torch.nn.Module:
    config = LlamaConfig(
        hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64, bos_token_id=0,
        eos_token_id=0,
    )  # fmt: skip
    return LlamaForCausalLM(config)


def mixtral() -> torch.nn.Module:
    config = MixtralConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, vocab_size=VOCAB, max_position_embeddings=64,
        num_local_experts=4, num_experts_per_tok=2, bos_token_id=0, eos_token_id=0,
    )  # fmt: skip
    return MixtralForCausalLM(config)


def gpt_oss(top_k: int) -> torch.nn.Module:
    config = GptOssConfig(
        hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
        num_key_value_heads=2, head_dim=8, vocab_size=VOCAB, max_position_embeddings=64,
        num_local_experts=4, num_experts_per_tok=top_k, bos_token_id=0, eos_token_id=0,
        pad_token_id=0,
    )  # fmt: skip
    return GptOssForCausalLM(config)


def tiny_gpt() -> torch.nn.Module:
    return TinyGPT(TinyGPTConfig(vocab_size=VOCAB, block_size=32, n_layer=2, n_head=2, n_embd=32))


def built(factory: Callable[[], torch.nn.Module], seed: int = 0) -> torch.nn.Module:
    torch.manual_seed(seed)
    model = factory()
    model.train()
    return model


def make_batches(micro: int = 1, seed: int = 1) -> list[Any]:
    generator = torch.Generator().manual_seed(seed)
    items: list[Any] = []
    for _ in range(STEPS):
        parts = []
        for _ in range(micro):
            tokens = torch.randint(0, VOCAB, (ROWS, TIME), generator=generator)
            parts.append({"input_ids": tokens, "labels": tokens.clone()})
        items.append(parts if micro > 1 else parts[0])
    return items


def tiny_gpt_loss(model: torch.nn.Module, batch: dict[str, torch.Tensor]) -> torch.Tensor:
    logits, _ = model(batch["input_ids"])  # (B, T, V)
    targets = batch["labels"][:, 1:]  # (B, T-1)
    losses = F.cross_entropy(logits[:, :-1].transpose(1, 2), targets, reduction="none")
    return losses.mean(dim=1)  # (B,)


def replay_steps(
    model: torch.nn.Module,
    observers: Sequence[StepObserver] = (),
    batches: list[Any] | None = None,
    steps: int = STEPS,
    scaler: Any = None,
    loss_fn: Callable[..., torch.Tensor] | None = None,
) -> list[ReplayStep]:
    """The replay loop as tscope runs it (deterministic settings), from step 1."""
    items = batches if batches is not None else make_batches()
    entry = Entry(path="<test>", batches=lambda start: iter(items[start:]), loss_fn=loss_fn)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR)
    plan = LrPlan(source="constant", group_lrs={s: (LR,) for s in range(1, steps + 1)})
    settings = LoopSettings(
        device=torch.device("cpu"),
        loss_path=ENTRY_LOSS if loss_fn is not None else MODEL_LOSS,
        normaliser=None,
        max_grad_norm=MAX_GRAD_NORM,
        scaler=scaler,
        observers=tuple(observers),
    )
    for observer in observers:  # as tscope.replay.api does once the state is restored
        observer.bind(entry, settings)
    with replay_settings("cpu"):
        records, skipped = run_steps(model, optimizer, entry, 1, steps, plan, settings)
    assert not skipped
    return records


class Capture(StepObserver):
    """Test-only: keeps copies of the named modules' outputs during step 1."""

    def __init__(self, names: Sequence[str]) -> None:
        self.names = names
        self.outputs: dict[str, list[Any]] = {name: [] for name in names}
        self.handles: list[Any] = []

    def on_step_start(self, context: StepContext) -> None:
        if context.step != 1:
            return
        modules = dict(context.model.named_modules())
        for name in self.names:
            hook = self._keep(name)
            self.handles.append(modules[name].register_forward_hook(hook))

    def _keep(self, name: str) -> Callable[..., None]:
        def keep(module: Any, inputs: Any, output: Any) -> None:
            if isinstance(output, torch.Tensor):
                self.outputs[name].append(output.detach().clone())
            else:
                self.outputs[name].append(tuple(t.detach().clone() for t in output))

        return keep

    def on_step_end(self, context: StepContext) -> None:
        for handle in self.handles:
            handle.remove()
        self.handles.clear()
