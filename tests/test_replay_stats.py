"""tscope.replay.stats on tiny real models, driven by the replay's own loop (run_steps).

Each statistic is checked against a brute-force computation from the same step's tensors, each
planted cause must show where it was planted, and a replay with every statistic on must train
exactly as one without: same losses, same gradient norms, same weights, bit for bit.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import pytest
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
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.gpt2 import modeling_gpt2
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

from tscope.demo.tiny_gpt import TinyGPT, TinyGPTConfig
from tscope.errors import UsageError
from tscope.model.replay import ReplayStep
from tscope.replay import StepContext, StepObserver
from tscope.replay.attribution import SampleAttribution
from tscope.replay.determinism import replay_settings
from tscope.replay.entry import Entry
from tscope.replay.loop import LoopSettings, run_steps
from tscope.replay.losses import ENTRY_LOSS, MODEL_LOSS
from tscope.replay.lr_source import LrPlan
from tscope.replay.stats import OBSERVER_NAMES, statistics_observers
from tscope.replay.stats.attention_max import max_attention_logit

VOCAB = 96
ROWS, TIME = 4, 16
STEPS = 3
LR = 3e-3
MAX_GRAD_NORM = 1.0
REL = 1e-5  # the bar for norms that must add up


# -- models and the loop ------------------------------------------------------------------------


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


class KeepExtras(StepObserver):
    """Test-only: the loop does not return context.extras; keep each step's."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []

    def on_step_end(self, context: StepContext) -> None:
        self.steps.append(dict(context.extras))


def causal_max(query: torch.Tensor, key: torch.Tensor, scaling: float) -> float:
    """Brute force in float64: the full (B, H, T, T) score matrix, causal."""
    scores = query.double() @ key.double().transpose(-1, -2) * scaling
    time = scores.shape[-1]
    allowed = torch.tril(torch.ones(time, time, dtype=torch.bool))
    return float(scores.masked_fill(~allowed, -math.inf).amax())


# -- gradients and updates ----------------------------------------------------------------------


@pytest.mark.parametrize("micro", [1, 3])
def test_per_tensor_and_per_block_grad_norms_add_up_to_the_pre_clip_norm(micro):
    model = built(gpt2)
    records = replay_steps(model, statistics_observers(model), make_batches(micro))
    blocks = ("transformer.h.0", "transformer.h.1")
    for record in records:
        tensors = {n: s for n, s in record.layers.items() if n.endswith(("weight", "bias"))}
        assert len(tensors) == len(list(model.parameters()))
        total = math.sqrt(sum(s["grad_norm"] ** 2 for s in tensors.values()))
        assert record.grad_norm is not None
        assert total == pytest.approx(record.grad_norm, rel=REL)
        for block in blocks:
            inside = [s["grad_norm"] for n, s in tensors.items() if n.startswith(block + ".")]
            expected = math.sqrt(sum(g * g for g in inside))
            assert record.layers[block]["grad_norm"] == pytest.approx(expected, rel=REL)


def test_grad_norms_are_unscaled_under_a_grad_scaler():
    model = built(gpt2)
    scaler = torch.amp.GradScaler("cpu", init_scale=2.0**12)
    observers = statistics_observers(model, names=["gradients"], grad_scaler=scaler)
    for record in replay_steps(model, observers, scaler=scaler):
        norms = [s["grad_norm"] for n, s in record.layers.items() if n.endswith(("weight", "bias"))]
        assert record.grad_norm is not None
        assert math.sqrt(sum(g * g for g in norms)) == pytest.approx(record.grad_norm, rel=REL)


def test_update_ratio_is_the_step_s_weight_change_over_the_weight_before_it():
    model = built(gpt2)
    before = {n: p.detach().clone() for n, p in model.named_parameters()}
    [record] = replay_steps(model, statistics_observers(model, names=["gradients"]), steps=1)
    for name, parameter in model.named_parameters():
        delta = float((parameter.detach().double() - before[name].double()).norm())
        weight = float(before[name].double().norm())
        stats = record.layers[name]
        assert stats["delta_norm"] == pytest.approx(delta, rel=1e-6, abs=1e-12)
        assert stats["weight_norm"] == pytest.approx(weight, rel=1e-6)
        if weight > 0:
            assert stats["update_ratio_per_step"] == pytest.approx(delta / weight, rel=1e-6)
        else:  # a zero-initialised bias: no ratio to a zero weight
            assert math.isnan(stats["update_ratio_per_step"])


# -- attention logits ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "overrides",
    [{}, {"attn_implementation": "eager"}, {"scale_attn_by_inverse_layer_idx": True}],
    ids=["sdpa", "eager", "inverse-layer-scaling"],
)
def test_gpt2_max_attention_logit_matches_brute_force_from_q_and_k(overrides):
    model = built(lambda: gpt2(**overrides))
    names = ["transformer.h.0.attn.c_attn", "transformer.h.1.attn.c_attn"]
    capture = Capture(names)
    record = replay_steps(model, [*statistics_observers(model), capture])[0]
    for layer, name in enumerate(names):
        [qkv] = capture.outputs[name]  # (B, T, 3C)
        query, key, _ = qkv.split(32, dim=2)
        query = query.view(ROWS, TIME, 2, 16).transpose(1, 2)  # (B, H, T, D)
        key = key.view(ROWS, TIME, 2, 16).transpose(1, 2)
        scaling = 16**-0.5 / (layer + 1 if overrides.get("scale_attn_by_inverse_layer_idx") else 1)
        measured = record.layers[f"transformer.h.{layer}.attn"]["attention_logit_max"]
        assert measured == pytest.approx(causal_max(query, key, scaling), rel=REL)


def test_llama_max_attention_logit_is_measured_after_rotary_embedding():
    model = built(llama)
    names = [f"model.layers.{i}.self_attn.{p}_proj" for i in (0, 1) for p in "qk"]
    capture = Capture([*names, "model.rotary_emb"])
    record = replay_steps(model, [*statistics_observers(model), capture])[0]
    [(cos, sin)] = capture.outputs["model.rotary_emb"]  # each (B, T, D)
    for layer in (0, 1):
        [query] = capture.outputs[f"model.layers.{layer}.self_attn.q_proj"]  # (B, T, 4·8)
        [key] = capture.outputs[f"model.layers.{layer}.self_attn.k_proj"]  # (B, T, 2·8)
        query = query.view(ROWS, TIME, 4, 8).transpose(1, 2)  # (B, 4, T, 8)
        key = key.view(ROWS, TIME, 2, 8).transpose(1, 2)  # (B, 2, T, 8)
        query, key = apply_rotary_pos_emb(query, key, cos, sin)
        expected = causal_max(query, repeat_kv(key, 2), 8**-0.5)
        measured = record.layers[f"model.layers.{layer}.self_attn"]["attention_logit_max"]
        assert measured == pytest.approx(expected, rel=REL)
        # Rotary embedding changes q·k: the maximum before it is another number (here 4e-4
        # apart, far outside the tolerance the rotated brute force is matched with).
        [raw_query] = capture.outputs[f"model.layers.{layer}.self_attn.q_proj"]
        [raw_key] = capture.outputs[f"model.layers.{layer}.self_attn.k_proj"]
        unrotated = causal_max(
            raw_query.view(ROWS, TIME, 4, 8).transpose(1, 2),
            repeat_kv(raw_key.view(ROWS, TIME, 2, 8).transpose(1, 2), 2),
            8**-0.5,
        )
        assert measured != pytest.approx(unrotated, rel=REL)


def test_padding_in_the_attention_mask_is_left_out_of_attention_and_logit_statistics():
    model = built(gpt2)
    items = make_batches()
    for item in items:
        mask = torch.ones(ROWS, TIME, dtype=torch.long)
        mask[1, 10:] = 0  # row 1: six padding tokens at the end
        item["attention_mask"] = mask
        item["labels"] = item["labels"].masked_fill(mask == 0, -100)
    names = ["transformer.h.0.attn.c_attn", "lm_head"]
    capture = Capture(names)
    record = replay_steps(model, [*statistics_observers(model), capture], items)[0]
    keep = items[0]["attention_mask"].bool()  # (B, T)
    [qkv] = capture.outputs[names[0]]
    query, key, _ = qkv.split(32, dim=2)
    query = query.view(ROWS, TIME, 2, 16).transpose(1, 2).double()
    key = key.view(ROWS, TIME, 2, 16).transpose(1, 2).double()
    scores = query @ key.transpose(-1, -2) * 16**-0.5  # (B, H, T, T)
    allowed = torch.tril(torch.ones(TIME, TIME, dtype=torch.bool)) & keep[:, None, None, :]
    expected = float(scores.masked_fill(~allowed, -math.inf).amax())
    measured = record.layers["transformer.h.0.attn"]["attention_logit_max"]
    assert measured == pytest.approx(expected, rel=REL)
    [logits] = capture.outputs["lm_head"]
    log_z = torch.logsumexp(logits.double(), dim=-1)[keep]  # real tokens only
    assert record.layers["lm_head"]["log_z_mean"] == pytest.approx(float(log_z.mean()), rel=REL)


def test_nanogpt_max_attention_logit_matches_brute_force():
    model = built(tiny_gpt)
    names = ["transformer.h.0.attn.c_attn", "transformer.h.1.attn.c_attn"]
    capture = Capture(names)
    observers = [*statistics_observers(model), capture]
    record = replay_steps(model, observers, loss_fn=tiny_gpt_loss)[0]
    for layer, name in enumerate(names):
        [qkv] = capture.outputs[name]
        query, key, _ = qkv.split(32, dim=2)
        query = query.view(ROWS, TIME, 2, 16).transpose(1, 2)
        key = key.view(ROWS, TIME, 2, 16).transpose(1, 2)
        measured = record.layers[f"transformer.h.{layer}.attn"]["attention_logit_max"]
        assert measured == pytest.approx(causal_max(query, key, 16**-0.5), rel=REL)


def test_chunked_maximum_equals_the_one_shot_maximum_with_masks_and_grouped_heads():
    generator = torch.Generator().manual_seed(3)
    query = torch.randn(2, 4, 9, 8, generator=generator)  # (B, H, T, D)
    key = torch.randn(2, 2, 9, 8, generator=generator)  # (B, Hkv, T, D)
    padding = torch.ones(2, 9, dtype=torch.long)
    padding[1, 6:] = 0
    boolean = (
        torch.tril(torch.ones(9, 9, dtype=torch.bool))[None, None]
        & padding.bool()[:, None, None, :]
    )
    additive = torch.zeros(2, 1, 9, 9).masked_fill(~boolean, torch.finfo(torch.float32).min)
    full = repeat_kv(key, 2)
    scores = (query.double() @ full.double().transpose(-1, -2)) * 0.3
    expected = float(scores.masked_fill(~boolean, -math.inf).amax())
    for chunk in (1, 2 * 4 * 9, 1 << 24):
        for kwargs in (
            {"mask": boolean},
            {"mask": additive},
            {"causal": True, "key_padding": padding},
        ):
            value = max_attention_logit(query, key, 0.3, chunk_elements=chunk, **kwargs)
            assert float(value) == pytest.approx(expected, rel=1e-6)


def test_attention_functions_are_given_back_after_each_step():
    local = dict(ALL_ATTENTION_FUNCTIONS._local_mapping)
    eager = modeling_gpt2.eager_attention_forward
    for overrides in ({}, {"attn_implementation": "eager"}):
        model = built(lambda overrides=overrides: gpt2(**overrides))
        replay_steps(model, statistics_observers(model, names=["attention"]), steps=1)
    assert ALL_ATTENTION_FUNCTIONS._local_mapping == local
    assert modeling_gpt2.eager_attention_forward is eager


def test_an_unknown_attention_layout_is_noted_not_guessed():
    model = torch.nn.Sequential(torch.nn.Embedding(VOCAB, 8), torch.nn.Linear(8, VOCAB))
    [observer] = statistics_observers(model, names=["attention"])
    context = StepContext(1, model, torch.optim.SGD(model.parameters()), [], 0, None, (0.1,))
    observer.on_step_start(context)
    observer.on_step_end(context)
    assert observer.notes and "not recognised" in observer.notes[0]
    assert not context.layers


# -- output logits ------------------------------------------------------------------------------


def test_output_logit_statistics_match_the_step_s_logits():
    model = built(gpt2)
    capture = Capture(["lm_head"])
    record = replay_steps(model, [*statistics_observers(model), capture])[0]
    [logits] = capture.outputs["lm_head"]  # (B, T, V)
    log_z = torch.logsumexp(logits.double(), dim=-1)
    stats = record.layers["lm_head"]
    assert stats["log_z_mean"] == pytest.approx(float(log_z.mean()), rel=REL)
    assert stats["log_z_max"] == pytest.approx(float(log_z.max()), rel=REL)
    assert stats["logit_max"] == pytest.approx(float(logits.max()), rel=REL)


# -- activations --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("factory", "norm", "blocks"),
    [
        (gpt2, "transformer.h.1.ln_1.weight", ("transformer.h.0", "transformer.h.1")),
        (llama, "model.layers.1.input_layernorm.weight", ("model.layers.0", "model.layers.1")),
    ],
    ids=["gpt2", "llama"],
)
def test_a_huge_norm_weight_shows_as_that_block_s_max_activation(factory, norm, blocks):
    runs = {}
    for planted in (False, True):
        model = built(factory)
        if planted:
            with torch.no_grad():
                dict(model.named_parameters())[norm][3] = 1e4
        names = ["activations"]
        runs[planted] = replay_steps(model, statistics_observers(model, names=names), steps=1)[0]
    clean, planted_run = runs[False].layers, runs[True].layers
    first, second = blocks
    assert planted_run[first] == clean[first]  # upstream of the plant: untouched
    assert planted_run[second]["activation_max_abs"] > 100 * clean[second]["activation_max_abs"]
    assert (
        planted_run[second]["activation_excess_kurtosis"]
        > clean[second]["activation_excess_kurtosis"]
    )


def test_block_activation_statistics_match_a_direct_computation():
    model = built(llama)
    capture = Capture(["model.layers.0"])
    record = replay_steps(model, [*statistics_observers(model), capture])[0]
    [output] = capture.outputs["model.layers.0"]
    values = (output if isinstance(output, torch.Tensor) else output[0]).double().reshape(-1)
    mean, std = values.mean(), values.std(unbiased=False)
    kurtosis = ((values - mean) ** 4).mean() / std**4 - 3
    stats = record.layers["model.layers.0"]
    assert stats["activation_mean"] == pytest.approx(float(mean), rel=1e-4, abs=1e-7)
    assert stats["activation_std"] == pytest.approx(float(std), rel=REL)
    assert stats["activation_max_abs"] == pytest.approx(float(values.abs().max()), rel=REL)
    assert stats["activation_excess_kurtosis"] == pytest.approx(float(kurtosis), rel=1e-4)


# -- non-finite origin --------------------------------------------------------------------------


def test_an_infinite_weight_is_named_as_the_forward_origin():
    model = built(gpt2)
    with torch.no_grad():
        model.transformer.h[1].mlp.c_fc.weight[0, 0] = math.inf
    kept = KeepExtras()
    observers = [*statistics_observers(model, names=["nonfinite"]), kept]
    record = replay_steps(model, observers, steps=1)[0]
    assert math.isnan(record.loss)
    origin = kept.steps[0]["nonfinite_origin"]
    assert origin == {"phase": "forward", "module": "transformer.h.1.mlp.c_fc", "micro_batch": 0}
    assert record.layers["transformer.h.1.mlp.c_fc"]["nonfinite_forward"] == 1.0
    assert record.layers["transformer.h.0.attn.c_attn.weight"]["grad_nonfinite"] == 1.0


class _PoisonGradient(torch.autograd.Function):
    """Identity forward; a NaN gradient backward: a module whose backward breaks."""

    @staticmethod
    def forward(ctx: Any, value: torch.Tensor) -> torch.Tensor:
        return value.view_as(value)

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        return grad * math.nan


def test_a_module_whose_backward_makes_nan_is_named_as_the_backward_origin():
    model = built(gpt2)
    c_fc = model.transformer.h[1].mlp.c_fc
    c_fc.register_forward_pre_hook(lambda module, args: (_PoisonGradient.apply(args[0]),))
    kept = KeepExtras()
    observers = [*statistics_observers(model, names=["nonfinite"]), kept]
    record = replay_steps(model, observers, steps=1)[0]
    assert math.isfinite(record.loss)
    extras = kept.steps[0]
    backward = extras["nonfinite_backward"]
    assert backward["module"] == "transformer.h.1.mlp.c_fc"
    assert backward["received_by"] == "transformer.h.1.ln_2"
    assert extras["nonfinite_origin"] == backward
    assert "nonfinite_forward" not in extras
    assert record.layers["transformer.h.1.mlp.c_fc"]["nonfinite_backward"] == 1.0


def test_a_finite_step_reports_no_origin():
    model = built(gpt2)
    kept = KeepExtras()
    observers = [*statistics_observers(model, names=["nonfinite"]), kept]
    record = replay_steps(model, observers, steps=1)[0]
    assert kept.steps == [{}]
    assert not any("nonfinite" in s or "grad_nonfinite" in s for s in record.layers.values())


# -- routers ------------------------------------------------------------------------------------


def test_mixtral_router_shares_sum_to_one_and_count_the_routed_experts():
    model = built(mixtral)
    gates = ["model.layers.0.mlp.gate", "model.layers.1.mlp.gate"]
    capture = Capture(gates)
    record = replay_steps(model, [*statistics_observers(model), capture])[0]
    for gate in gates:
        stats = record.layers[gate]
        shares = [stats[f"expert_share_{e:03d}"] for e in range(4)]
        assert sum(shares) == pytest.approx(1.0, abs=1e-12)
        [(router_logits, _, _)] = capture.outputs[gate]  # (tokens, E)
        chosen = torch.topk(router_logits.softmax(dim=-1), 2, dim=-1).indices
        counts = torch.bincount(chosen.reshape(-1), minlength=4).double()
        assert shares == pytest.approx((counts / counts.sum()).tolist(), abs=1e-12)
        assert stats["router_top_k"] == 2.0
        assert stats["expert_share_max"] == max(shares)


def test_a_router_biased_to_one_expert_shows_its_takeover():
    model = built(lambda: gpt_oss(top_k=1))
    with torch.no_grad():
        model.model.layers[1].mlp.router.bias[2] = 50.0
    record = replay_steps(model, statistics_observers(model, names=["router"]), steps=1)[0]
    biased = record.layers["model.layers.1.mlp.router"]
    assert biased["expert_share_002"] > 0.9
    assert biased["expert_token_fraction_max"] > 0.9
    assert record.layers["model.layers.0.mlp.router"]["expert_share_max"] < 0.9


def test_the_router_statistic_applies_only_to_mixture_of_experts_models():
    assert "router" not in [o.name for o in statistics_observers(built(gpt2))]
    assert "router" in [o.name for o in statistics_observers(built(mixtral))]


def test_an_unknown_statistic_name_lists_the_valid_ones():
    with pytest.raises(UsageError, match="valid ones: " + ", ".join(OBSERVER_NAMES)):
        statistics_observers(built(gpt2), names=["gradients", "entropy"])


# -- the replay itself is unchanged -------------------------------------------------------------


@pytest.mark.parametrize(
    ("factory", "micro", "loss_fn"),
    [
        (gpt2, 1, None),
        (lambda: gpt2(attn_implementation="eager"), 2, None),
        (llama, 1, None),
        (mixtral, 2, None),
        (lambda: gpt_oss(top_k=2), 1, None),
        (tiny_gpt, 1, tiny_gpt_loss),
    ],
    ids=["gpt2", "gpt2-eager-accumulation", "llama", "mixtral-accumulation", "gpt-oss", "nanogpt"],
)
def test_statistics_do_not_change_the_replay_by_a_single_bit(factory, micro, loss_fn):
    results = {}
    for observed in (False, True):
        model = built(factory)
        observers = statistics_observers(model) if observed else []
        records = replay_steps(model, observers, make_batches(micro), loss_fn=loss_fn)
        weights = {n: p.detach().clone() for n, p in model.named_parameters()}
        results[observed] = (records, weights)
    (plain, plain_weights), (observed_records, observed_weights) = results[False], results[True]
    for a, b in zip(plain, observed_records, strict=True):
        assert (a.loss, a.grad_norm, a.micro_losses, a.per_sample_loss) == (
            b.loss,
            b.grad_norm,
            b.micro_losses,
            b.per_sample_loss,
        )
        assert not a.layers and b.layers
    for name, tensor in plain_weights.items():
        assert torch.equal(tensor, observed_weights[name]), name


@pytest.mark.parametrize("factory", [gpt2, llama], ids=["gpt2", "llama"])
def test_statistics_count_the_training_step_not_the_per_sample_gradient_passes(factory):
    runs = {}
    attribution = SampleAttribution([1, 2])  # first: it suspends later observers' hooks
    for attributed in (False, True):
        model = built(factory)
        observers: list[StepObserver] = [attribution] if attributed else []
        runs[attributed] = replay_steps(model, [*observers, *statistics_observers(model)])
    assert [r.step for r in attribution.results] == [1, 2]
    assert all(r.gradients_checked for r in attribution.results)
    for plain, attributed in zip(runs[False], runs[True], strict=True):
        assert (plain.loss, plain.grad_norm) == (attributed.loss, attributed.grad_norm)
        for layer, stats in plain.layers.items():
            assert {k: attributed.layers[layer][k] for k in stats} == stats, layer
