"""Canonical metric names shared by readers (which produce them) and analyzers (which use them)."""

from __future__ import annotations

LOSS = "train/loss"
GRAD_NORM = "train/grad_norm"
LEARNING_RATE = "train/learning_rate"
EVAL_LOSS = "eval/loss"
LOSS_SCALE = "train/loss_scale"
SKIPPED_STEPS = "train/skipped_steps"


def is_loss_like(metric: str) -> bool:
    """Series the spike detectors scan as losses (train and eval losses, per-source variants)."""
    key = metric.lower()
    return key in (LOSS, EVAL_LOSS) or key.endswith("/loss") or key.endswith("_loss")
