"""tscope.replay.stats' block activations, non-finite origins and routers on tiny real models: each
planted cause (a huge norm weight, an infinite weight, a NaN backward, a biased router) shows where
it was planted, and a finite step reports nothing.
"""

from __future__ import annotations

import math
from typing import Any

import pytest
import torch
from replay_stats_models import REL, Capture, built, gpt2, gpt_oss, llama, mixtral, replay_steps

from tscope.errors import UsageError
from tscope.replay import StepContext, StepObserver
from tscope.replay.stats import OBSERVER_NAMES, statistics_observers


class KeepExtras(StepObserver):
    """Test-only: the loop does not return context.extras; keep each step's."""

    def __init__(self) -> None:
        self.steps: list[dict[str, Any]] = []

    def on_step_end(self, context: StepContext) -> None:
        self.steps.append(dict(context.extras))


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
