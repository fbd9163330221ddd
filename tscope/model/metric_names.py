"""Canonical metric names shared by readers (which produce them) and analyzers (which use them)."""

from __future__ import annotations

LOSS = "train/loss"
GRAD_NORM = "train/grad_norm"
LEARNING_RATE = "train/learning_rate"
EVAL_LOSS = "eval/loss"
LOSS_SCALE = "train/loss_scale"
SKIPPED_STEPS = "train/skipped_steps"
# Longest series name a case holds. Real names stay under ~150 characters (W&B's nested keys,
# per-layer statistics); each name repeats in every chart point's tooltip, so ten 1 MB names in a
# 10 MB CSV made a 1 GB case.html. Readers leave longer ones out (ingest/logs/series_cap.py) and
# a case.json holding one is not tscope's.
MAX_METRIC_NAME_CHARS = 1000


def is_loss_like(metric: str) -> bool:
    """Series the spike detectors scan as losses (train and eval losses, per-source variants)."""
    key = metric.lower()
    return key in (LOSS, EVAL_LOSS) or key.endswith("/loss") or key.endswith("_loss")
