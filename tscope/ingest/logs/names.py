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


# The same names with separators squeezed out (`GradNorm`, `LearningRate`, `trainLoss`, the
# PyTorch TensorBoard tutorial's tags) and the tags that put the split last (`Loss/train`).
_SQUEEZED = {
    re.sub(r"[_/.]", "", key): value for key, value in _CANONICAL.items() if "/" not in key
}
_SQUEEZED.update({"gnorm": GRAD_NORM, "gradnorm": GRAD_NORM})
_SPLIT_SUFFIXES = {
    "train": "",
    "training": "",
    "val": "val_",
    "valid": "val_",
    "validation": "val_",
    "eval": "eval_",
}


# Lightning's LearningRateMonitor logs `lr-{optimizer class}` for one parameter group and
# `lr-{class}/pg1`, `/pg2`, ... for several: the first group is the run's LR (`-momentum`
# series and a second optimizer's `lr-{class}-1` are other series).
_LIGHTNING_LR = re.compile(r"^lr_[a-z][a-z0-9]*(?:/pg1)?$")


def canonical_metric(name: str) -> str:
    """The canonical name for a producer's metric name; unknown names keep a cleaned-up form."""
    key = _normalize_key(name)
    if key in _CANONICAL:
        return _CANONICAL[key]
    if _LIGHTNING_LR.match(key):
        return LEARNING_RATE
    base, _, split = key.rpartition("/")
    if base and "/" not in base and split in _SPLIT_SUFFIXES:
        key = _SPLIT_SUFFIXES[split] + base  # "loss/train" -> "loss", "loss/val" -> "val_loss"
        if key in _CANONICAL:
            return _CANONICAL[key]
    squeezed = re.sub(r"[_/.]", "", key)
    if squeezed in _SQUEEZED:
        return _SQUEEZED[squeezed]
    return name.strip()
