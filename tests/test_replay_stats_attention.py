"""tscope.replay.stats' attention and output logits on tiny real models (GPT-2, Llama, nanoGPT),
each checked against a brute-force computation from the same step's q, k and logits.
"""

from __future__ import annotations

import math

import pytest
import torch
from replay_stats_models import (
    REL,
    ROWS,
    TIME,
    VOCAB,
    Capture,
    built,
    gpt2,
    llama,
    make_batches,
    replay_steps,
    tiny_gpt,
    tiny_gpt_loss,
)
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS
from transformers.models.gpt2 import modeling_gpt2
from transformers.models.llama.modeling_llama import apply_rotary_pos_emb, repeat_kv

from tscope.replay import StepContext
from tscope.replay.stats import statistics_observers
from tscope.replay.stats.attention_max import max_attention_logit


def causal_max(query: torch.Tensor, key: torch.Tensor, scaling: float) -> float:
    """Brute force in float64: the full (B, H, T, T) score matrix, causal."""
    scores = query.double() @ key.double().transpose(-1, -2) * scaling
    time = scores.shape[-1]
    allowed = torch.tril(torch.ones(time, time, dtype=torch.bool))
    return float(scores.masked_fill(~allowed, -math.inf).amax())


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
