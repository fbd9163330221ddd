"""Seeded runs with one issue-13 cause planted (and their near-miss controls), as series dicts.

Each builder returns the user's own series (`loss`, `grad_norm`, `lr`, `eval_loss`; NaN = not
logged at that step) so a test can write it as CSV, JSONL, trainer_state.json or TensorBoard
(tests/user_logs.py) or turn it into a Run directly (`as_run`). PLANTED / CONTROLS list them per
category for the measurement in scripts/measure_rules.py (false alarms and recall per rule).
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from tests.synthetic import grad_norms, loss_curve, make_run, warmup_cosine
from tscope.model import Run
from tscope.model.metric_names import EVAL_LOSS, GRAD_NORM, LEARNING_RATE, LOSS

Series = dict[str, np.ndarray]
_CANONICAL = {"loss": LOSS, "grad_norm": GRAD_NORM, "lr": LEARNING_RATE, "eval_loss": EVAL_LOSS}


def as_run(series: Series) -> Run:
    """The series as a Run through the real assembly path; unlogged (NaN) eval points dropped."""
    return make_run(
        {_CANONICAL[name]: values for name, values in series.items() if name != "eval_loss"},
        extra_reads=_eval_read(series),
    )


def _eval_read(series: Series) -> list:
    from tscope.model import LogRead

    if "eval_loss" not in series:
        return []
    values = series["eval_loss"]
    rows = [(i + 1, EVAL_LOSS, float(v), EVAL_LOSS) for i, v in enumerate(values) if np.isfinite(v)]
    return [
        LogRead(
            kind="synthetic", path="eval.jsonl", metrics=LogRead.rows_to_table(rows, "eval.jsonl")
        )
    ]


def healthy_series(steps: int = 400, seed: int = 0) -> Series:
    return {
        "loss": loss_curve(steps, seed),
        "grad_norm": grad_norms(steps, seed),
        "lr": warmup_cosine(steps),
    }


# --- grad_norm_high --------------------------------------------------------------------------------


def grad_norm_growth(steps: int = 400, seed: int = 0, at: int = 200, factor: float = 8.0) -> Series:
    """Clipping off / LR too high: from `at` the gradient norm climbs ×factor over 40 steps and
    stays there while the loss still falls (no spike: a slow, persistent rise)."""
    series = healthy_series(steps, seed)
    ramp = np.clip((np.arange(steps) - (at - 1)) / 40.0, 0.0, 1.0)
    series["grad_norm"] = series["grad_norm"] * (1.0 + (factor - 1.0) * ramp)
    return series


def grad_norm_drift(steps: int = 400, seed: int = 0) -> Series:
    """Control: the healthy late-training drift, ×2 over the second half (LR decaying)."""
    series = healthy_series(steps, seed)
    series["grad_norm"] = series["grad_norm"] * np.linspace(1.0, 2.0, steps) ** 1.0
    return series


# --- loss_plateau ----------------------------------------------------------------------------------


def lr_far_too_low(steps: int = 400, seed: int = 0) -> Series:
    """The LR is 1e-9 (a units slip): the loss sits at its initial ~ln(vocab) with batch noise."""
    rng = np.random.default_rng(seed)
    return {
        "loss": 10.8 * (1 + 0.02 * rng.standard_normal(steps)),
        "grad_norm": grad_norms(steps, seed) * 5.0,
        "lr": warmup_cosine(steps, peak=1e-9),
    }


def frozen_model(steps: int = 400, seed: int = 0) -> Series:
    """Every parameter frozen: grad norm 0, the loss flat around 4.2 with batch noise."""
    rng = np.random.default_rng(seed)
    return {
        "loss": 4.2 * (1 + 0.03 * rng.standard_normal(steps)),
        "grad_norm": np.zeros(steps),
        "lr": warmup_cosine(steps),
    }


def late_start(steps: int = 400, seed: int = 0) -> Series:
    """Stuck for the first 60% (e.g. an adapter attached late), then learning."""
    series = healthy_series(steps, seed)
    stuck = int(0.6 * steps)
    rng = np.random.default_rng(seed + 7)
    tail = loss_curve(steps - stuck, seed) * (4.5 / 4.5)
    series["loss"] = np.concatenate([4.5 * (1 + 0.02 * rng.standard_normal(stuck)), tail])
    return series


def converged_fine_tune(steps: int = 400, seed: int = 0) -> Series:
    """Control: an SFT loss falls 1.3 → 0.9 in its first 8% and then stays there (converged)."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps, dtype=float)
    loss = (0.9 + 0.4 * np.exp(-t / (0.03 * steps))) * (1 + 0.03 * rng.standard_normal(steps))
    return {"loss": loss, "grad_norm": grad_norms(steps, seed), "lr": warmup_cosine(steps, 2e-4)}


def slow_pretraining(steps: int = 400, seed: int = 0) -> Series:
    """Control: a long pre-training log, loss falling steadily by 6% with 1% noise."""
    rng = np.random.default_rng(seed)
    loss = np.linspace(3.3, 3.1, steps) * (1 + 0.01 * rng.standard_normal(steps))
    return {"loss": loss, "grad_norm": grad_norms(steps, seed), "lr": warmup_cosine(steps)}


# --- overfitting ---------------------------------------------------------------------------------


def _evals(steps: int, every: int, curve: np.ndarray, seed: int, noise: float) -> np.ndarray:
    """An eval series logged every `every` steps (NaN elsewhere) with small eval-to-eval noise."""
    rng = np.random.default_rng(seed + 99)
    values = np.full(steps, np.nan)
    values[every - 1 :: every] = curve[every - 1 :: every] * (1 + noise * rng.standard_normal())
    return values


def overfit(steps: int = 400, seed: int = 0, at: int = 200, rise: float = 0.10) -> Series:
    """Train keeps falling (memorizing); eval falls to its best at `at`, then climbs by `rise` by the end."""
    series = healthy_series(steps, seed)
    t = np.arange(1, steps + 1, dtype=float)
    base = 2.8 + 1.5 * np.exp(-t / (steps / 8))
    climb = np.where(t > at, rise * (t - at) / (steps - at), 0.0)
    # Memorizing: the train loss goes on falling, by 8% more from `at` to the end.
    series["loss"] = series["loss"] * (1 - 0.08 * np.where(t > at, (t - at) / (steps - at), 0.0))
    series["eval_loss"] = _evals(steps, 25, base * (1 + climb), seed, 0.002)
    return series


def eval_converged(steps: int = 400, seed: int = 0) -> Series:
    """Control: eval falls and flattens, ±0.3% between evals (as the DPO run's converged tail)."""
    series = healthy_series(steps, seed)
    t = np.arange(1, steps + 1, dtype=float)
    rng = np.random.default_rng(seed + 5)
    curve = (2.8 + 1.5 * np.exp(-t / (steps / 16))) * (1 + 0.003 * rng.standard_normal(steps))
    series["eval_loss"] = _evals(steps, 25, curve, seed, 0.0)
    return series


def _runs(builder: Callable[..., Series], **kwargs: object) -> Callable[..., Run]:
    return lambda seed: as_run(builder(seed=seed, **kwargs))


PLANTED: dict[str, list[tuple[str, Callable[..., Run]]]] = {
    "grad_norm_high": [
        ("grad norm ×8 from step 200", _runs(grad_norm_growth)),
        ("grad norm ×6 from step 300", _runs(grad_norm_growth, at=300, factor=6.0)),
    ],
}
PLANTED["loss_plateau"] = [
    ("LR 1e-9, flat from step 1", _runs(lr_far_too_low)),
    ("frozen, grad norm 0", _runs(frozen_model)),
    ("stuck for the first 60%", _runs(late_start)),
]
PLANTED["overfitting"] = [
    ("eval +10% after step 200", _runs(overfit)),
    ("eval +5% after step 300", _runs(overfit, at=300, rise=0.05)),
]
CONTROLS: dict[str, list[tuple[str, Callable[..., Run]]]] = {
    "overfitting": [
        ("healthy, eval converged", _runs(eval_converged)),
        ("eval +1.5% after step 300", _runs(overfit, at=300, rise=0.015)),
    ],
    "loss_plateau": [
        ("healthy", _runs(healthy_series)),
        ("converged fine-tune", _runs(converged_fine_tune)),
        ("slow pre-training (−6%)", _runs(slow_pretraining)),
    ],
    "grad_norm_high": [
        ("healthy", _runs(healthy_series)),
        ("late drift ×2", _runs(grad_norm_drift)),
        ("grad norm ×3 from step 200", _runs(grad_norm_growth, factor=3.0)),
    ],
}


# --- lr_too_low / lr_too_high from the configuration ----------------------------------------------

LORA_CONFIG = {"peft_type": "LORA", "lora_r": 8, "lora_alpha": 16}


def as_configured_run(series: Series, config: dict[str, object]) -> Run:
    """`as_run` with the run's config (as training arguments or adapter_config.json give it)."""
    from tscope.model import LogRead

    return make_run(
        {_CANONICAL[name]: values for name, values in series.items()},
        extra_reads=[LogRead(kind="synthetic", path="config.json", config=dict(config))],
    )


def _sft_curve(steps: int, seed: int, start: float = 2.0, end: float = 1.2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    t = np.arange(steps, dtype=float)
    return (end + (start - end) * np.exp(-t / (steps / 6))) * (
        1 + 0.03 * rng.standard_normal(steps)
    )


def _flat(steps: int, seed: int, level: float) -> np.ndarray:
    return level * (1 + 0.03 * np.random.default_rng(seed).standard_normal(steps))


def lora_lr_far_too_low(steps: int = 400, seed: int = 0) -> Run:
    """LoRA SFT at a peak LR of 1e-7 (2e-4 meant): the loss sits at its start, 2.0."""
    series = {
        "loss": _flat(steps, seed, 2.0),
        "grad_norm": grad_norms(steps, seed),
        "lr": warmup_cosine(steps, peak=1e-7),
    }
    return as_configured_run(series, LORA_CONFIG)


def pretraining_lr_low_still_learning(steps: int = 400, seed: int = 0) -> Run:
    """From scratch (starts at 10.8) at 3e-6, ×20 below the range, but the loss still falls: info."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps, dtype=float)
    loss = (7.0 + 3.8 * np.exp(-t / (steps / 3))) * (1 + 0.01 * rng.standard_normal(steps))
    series = {"loss": loss, "grad_norm": grad_norms(steps, seed), "lr": warmup_cosine(steps, 3e-6)}
    return as_configured_run(series, {})


def fine_tune_lr_far_too_high(steps: int = 400, seed: int = 0) -> Run:
    """A fine-tune (starts at 2.0) at a peak LR of 2e-2: after warm-up the loss climbs to ~7."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps, dtype=float)
    rise = np.clip((t - 30) / 60, 0, 1)
    loss = (1.9 + 5.0 * rise) * (1 + 0.03 * rng.standard_normal(steps))
    series = {
        "loss": loss,
        "grad_norm": grad_norms(steps, seed) * (1 + 10 * rise),
        "lr": warmup_cosine(steps, 2e-2, warmup=40),
    }
    return as_configured_run(series, {})


def lora_lr_high_but_fine(steps: int = 400, seed: int = 0) -> Run:
    """LoRA at 1e-2 (×20 the range's top) whose loss falls normally: context (info)."""
    series = {
        "loss": _sft_curve(steps, seed),
        "grad_norm": grad_norms(steps, seed),
        "lr": warmup_cosine(steps, 1e-2),
    }
    return as_configured_run(series, LORA_CONFIG)


def lora_typical(steps: int = 400, seed: int = 0) -> Run:
    """Control: LoRA SFT at 2e-4 (QLoRA's LR), loss 2.0 → 1.2."""
    series = {
        "loss": _sft_curve(steps, seed),
        "grad_norm": grad_norms(steps, seed),
        "lr": warmup_cosine(steps, 2e-4),
    }
    return as_configured_run(series, LORA_CONFIG)


def full_fine_tune_low_typical(steps: int = 400, seed: int = 0) -> Run:
    """Control: a fine-tune at 1e-6, ×5 below the range but not far; the loss barely moves."""
    series = {
        "loss": _flat(steps, seed, 1.5),
        "grad_norm": grad_norms(steps, seed),
        "lr": warmup_cosine(steps, 1e-6),
    }
    return as_configured_run(series, {})


def pretraining_typical(steps: int = 400, seed: int = 0) -> Run:
    """Control: from scratch at 6e-4 (GPT-3 125M), loss 10.8 → 4."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps, dtype=float)
    loss = (4.0 + 6.8 * np.exp(-t / (steps / 8))) * (1 + 0.02 * rng.standard_normal(steps))
    series = {"loss": loss, "grad_norm": grad_norms(steps, seed), "lr": warmup_cosine(steps, 6e-4)}
    return as_configured_run(series, {})


def _configured(builder: Callable[..., Run]) -> Callable[..., Run]:
    return lambda seed: builder(seed=seed)


PLANTED["lr_too_low"] = [("LoRA at 1e-7, flat", _configured(lora_lr_far_too_low))]
PLANTED["lr_too_high"] = [("fine-tune at 2e-2, climbs", _configured(fine_tune_lr_far_too_high))]
# Far outside the range but the curve is fine: the finding is info, never a warning.
CONTROLS["lr_too_low"] = [
    ("pre-training at 3e-6, still learning", _configured(pretraining_lr_low_still_learning)),
    ("fine-tune at 1e-6 (not far)", _configured(full_fine_tune_low_typical)),
    ("LoRA at 2e-4", _configured(lora_typical)),
    ("pre-training at 6e-4", _configured(pretraining_typical)),
]
CONTROLS["lr_too_high"] = [
    ("LoRA at 1e-2, loss falls", _configured(lora_lr_high_but_fine)),
    ("LoRA at 2e-4", _configured(lora_typical)),
    ("pre-training at 6e-4", _configured(pretraining_typical)),
]
