"""lr_too_low / lr_too_high from the configuration, against the kind of training."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tests import planted_logs as planted
from tscope.analyzers.training_kind import training_kind
from tscope.pipeline import analyze_run, build_case

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata" / "hf_trainer_state"
SEEDS = range(3)


def _lr_findings(run):  # type: ignore[no-untyped-def]
    return [f for f in build_case(run, []).findings if f.category in ("lr_too_low", "lr_too_high")]


@pytest.mark.parametrize("seed", SEEDS)
def test_lora_at_a_far_too_low_lr_with_a_flat_loss_warns(seed: int) -> None:
    found = _lr_findings(planted.lora_lr_far_too_low(seed=seed))
    assert [(f.category, f.severity) for f in found] == [("lr_too_low", "warning")]
    assert found[0].evidence["training_kind"] == "lora"
    assert found[0].evidence["peak_lr"] == pytest.approx(1e-7)
    assert found[0].evidence["factor_below_range"] == pytest.approx(500.0)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_far_too_low_lr_whose_loss_still_falls_is_context(seed: int) -> None:
    found = _lr_findings(planted.pretraining_lr_low_still_learning(seed=seed))
    assert [(f.category, f.severity) for f in found] == [("lr_too_low", "info")]
    assert found[0].evidence["training_kind"] == "pre_training"


@pytest.mark.parametrize("seed", SEEDS)
def test_a_fine_tune_that_blows_up_at_a_far_too_high_lr_warns_with_the_range(seed: int) -> None:
    found = _lr_findings(planted.fine_tune_lr_far_too_high(seed=seed))
    assert [(f.category, f.severity) for f in found] == [("lr_too_high", "warning")]
    assert found[0].evidence["training_kind"] == "fine_tune"
    assert found[0].evidence["factor_above_range"] == pytest.approx(2e-2 / 5e-4)


@pytest.mark.parametrize("seed", SEEDS)
def test_a_far_too_high_lr_whose_loss_falls_is_context(seed: int) -> None:
    found = _lr_findings(planted.lora_lr_high_but_fine(seed=seed))
    assert [(f.category, f.severity) for f in found] == [("lr_too_high", "info")]


@pytest.mark.parametrize(
    "builder",
    [planted.lora_typical, planted.pretraining_typical, planted.full_fine_tune_low_typical],
)
@pytest.mark.parametrize("seed", SEEDS)
def test_typical_lrs_are_silent(builder, seed: int) -> None:  # type: ignore[no-untyped-def]
    assert _lr_findings(builder(seed=seed)) == []


def test_the_kind_is_read_from_the_adapter_config_and_the_loss_start() -> None:
    lora = training_kind(planted.lora_typical(seed=0))
    assert lora is not None and lora.kind == "lora"
    assert any("adapter settings" in reason for reason in lora.reasons)
    scratch = training_kind(planted.pretraining_typical(seed=0))
    assert scratch is not None and scratch.kind == "pre_training"
    healthy = planted.as_run(planted.healthy_series())  # starts at 4.5 nats, no vocab: unknown
    assert training_kind(healthy) is None


@pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is not present")
@pytest.mark.parametrize(
    ("name", "kind"),
    [
        ("baize_tcm_lora__trainer_state.json", "lora"),
        ("tinyllama_chat_dpo__trainer_state.json", "preference"),
        ("whisper_large_v2_ja__trainer_state.json", "fine_tune"),
    ],
)
def test_real_runs_are_told_apart_and_their_lrs_are_typical(name: str, kind: str) -> None:
    analysis = analyze_run(REALDATA / name, read_weights=False)
    found = training_kind(analysis.run)
    assert found is not None and found.kind == kind
    lr = [f for f in analysis.case.findings if f.category in ("lr_too_low", "lr_too_high")]
    assert lr == []


def test_a_log_that_ends_inside_the_warm_up_is_not_judged_too_low() -> None:
    import numpy as np

    series = planted.healthy_series(steps=200)
    series["loss"] = 10.8 * (1 + 0.01 * np.random.default_rng(0).standard_normal(200))
    series["lr"] = np.linspace(1e-8, 3e-6, 200)  # a 6e-5 warm-up cut off at 5%
    assert _lr_findings(planted.as_configured_run(series, {})) == []


@pytest.mark.parametrize("seed", SEEDS)
@pytest.mark.parametrize(("end", "severity"), [(10.4, "warning"), (7.0, "info")])
def test_a_far_too_low_lr_warns_when_the_loss_never_leaves_the_untrained_level(
    seed: int, end: float, severity: str
) -> None:
    """From scratch (ln 50,257 = 10.8) at 3e-6: a loss still at 96% of ln(vocab) after 400 steps
    has not learned even the token frequencies (blind set, session 27: a Trainer Llama at 3e-6
    went 5.54 -> 5.32 of ln 256 and was context, "the loss still falls"); one that got to 65%
    of it learns, slowly: context."""
    rng = np.random.default_rng(seed)
    t = np.arange(400, dtype=float)
    loss = (end + (10.8 - end) * np.exp(-t / 130)) * (1 + 0.01 * rng.standard_normal(400))
    series = {
        "loss": loss,
        "grad_norm": planted.grad_norms(400, seed),
        "lr": planted.warmup_cosine(400, 3e-6),
    }
    found = _lr_findings(planted.as_configured_run(series, {"vocab_size": 50257}))
    assert [(f.category, f.severity) for f in found] == [("lr_too_low", severity)]
    assert found[0].evidence["still_untrained"] is (severity == "warning")
