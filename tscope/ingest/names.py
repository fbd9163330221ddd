"""Canonical metric names: every producer's spelling mapped to one name, the original kept."""

from __future__ import annotations

import re

from tscope.model.metric_names import (
    EVAL_LOSS,
    GRAD_NORM,
    LEARNING_RATE,
    LOSS,
    LOSS_SCALE,
    SKIPPED_STEPS,
)

# Keys are normalized first: lower-cased, spaces/dashes to underscores, one "train/" prefix dropped.
_CANONICAL = {
    "loss": LOSS,
    "train_loss": LOSS,
    "lm_loss": LOSS,
    "training_loss": LOSS,
    "loss_step": LOSS,
    "train_loss_step": LOSS,
    "grad_norm": GRAD_NORM,
    "gradient_norm": GRAD_NORM,
    "grad_norm_total": GRAD_NORM,
    "global_grad_norm": GRAD_NORM,
    "learning_rate": LEARNING_RATE,
    "lr": LEARNING_RATE,
    "lr_group_0": LEARNING_RATE,
    "lr_adamw": LEARNING_RATE,
    "eval_loss": EVAL_LOSS,
    "val_loss": EVAL_LOSS,
    "validation_loss": EVAL_LOSS,
    "eval/loss": EVAL_LOSS,
    "val/loss": EVAL_LOSS,
    "validation/loss": EVAL_LOSS,
    "eval/lm_loss": EVAL_LOSS,
    "val/lm_loss": EVAL_LOSS,
    "lm_loss_validation": EVAL_LOSS,
    "loss_scale": LOSS_SCALE,
    "skipped_iterations": SKIPPED_STEPS,
    "number_of_skipped_iterations": SKIPPED_STEPS,
    "skipped_steps": SKIPPED_STEPS,
}


def _normalize_key(name: str) -> str:
    key = name.strip().lower()
    key = re.sub(r"[\s\-]+", "_", key)
    if key.startswith("train/"):
        key = key[len("train/") :]
    return key


def canonical_metric(name: str) -> str:
    """The canonical name for a producer's metric name; unknown names keep a cleaned-up form."""
    key = _normalize_key(name)
    if key in _CANONICAL:
        return _CANONICAL[key]
    return name.strip()
