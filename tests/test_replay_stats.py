"""tscope.replay.stats on tiny real models, driven by the replay's own loop (run_steps): gradient
norms and update ratios, and a replay with every statistic on trains exactly as one without (same
losses, same gradient norms, same weights, bit for bit). Attention and output logits are
tests/test_replay_stats_attention.py; activations, non-finite origins and routers
tests/test_replay_stats_activations.py. Each statistic is checked against a brute-force
computation from the same step's tensors.
"""

from __future__ import annotations

import math

import pytest
import torch
from replay_stats_models import (
    REL,
    built,
    gpt2,
    gpt_oss,
    llama,
    make_batches,
    mixtral,
    replay_steps,
    tiny_gpt,
    tiny_gpt_loss,
)

from tscope.replay import StepObserver
from tscope.replay.attribution import SampleAttribution
from tscope.replay.stats import statistics_observers


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
