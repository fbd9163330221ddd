"""What the run logged, in the shape the replay compares against."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from tscope.analyzers.signals import loss_series, primary_loss
from tscope.ingest.checkpoints.base import ReplayFacts
from tscope.model import Run
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE

# How the producer turns step losses into a logged value.
TRAINER_LOGGING = "trainer"  # mean over the logging window, accumulated in float32 (Trainer)
PER_STEP_LOGGING = "per_step"  # the logged step's own loss (nanoGPT and most plain loops)


@dataclass(frozen=True)
class LoggedSeries:
    loss: dict[int, float]  # as logged (a value the producer's NaN filter wrote stays as written)
    hidden_nonfinite: frozenset[int]  # steps whose logged loss covers a non-finite one
    grad_norm: dict[int, float]
    learning_rate: dict[int, float]
    convention: str  # TRAINER_LOGGING or PER_STEP_LOGGING
    nan_filter: bool  # Trainer logging_nan_inf_filter: a non-finite micro-batch loss is replaced


def logged_series(run: Run, facts: ReplayFacts, run_config: Mapping[str, Any]) -> LoggedSeries:
    metric = primary_loss(run)
    loss = _as_dict(*run.series(metric)) if metric else {}
    filtered = _as_dict(*loss_series(run, metric)) if metric else {}
    hidden = frozenset(
        s for s, v in filtered.items() if not np.isfinite(v) and np.isfinite(loss.get(s, np.nan))
    )
    trainer = facts.trainer_logging
    return LoggedSeries(
        loss=loss,
        hidden_nonfinite=hidden,
        grad_norm=_as_dict(*run.series(GRAD_NORM)),
        learning_rate=_as_dict(*run.series(LEARNING_RATE)),
        convention=TRAINER_LOGGING if trainer else PER_STEP_LOGGING,
        nan_filter=trainer and run_config.get("logging_nan_inf_filter", True) is not False,
    )


def _as_dict(steps: np.ndarray, values: np.ndarray) -> dict[int, float]:
    return {int(s): float(v) for s, v in zip(steps.tolist(), values.tolist(), strict=True)}
