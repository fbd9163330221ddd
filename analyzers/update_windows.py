"""The windows between checkpoints that update_ratio_high judges, and the LR each ran at.

A window is the span (previous checkpoint, checkpoint]; its update ratio per step comes from the
checkpoint statistics, its LR from the optimizer state the checkpoints hold (or, when they hold
none, from the LR the run logged). Kept apart from the rule (explainers/updates.py), which only
compares windows and words the finding.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.checkpoint_lr import is_lr_jump
from tscope.model.metric_names import LEARNING_RATE

if TYPE_CHECKING:
    import pandas as pd


@dataclass(frozen=True)
class CheckpointLr:
    """The LR at each checkpoint step, and the windows across which it jumped."""

    at_step: dict[int, float]
    jump_ends: frozenset[int]  # checkpoint steps ending a window the LR jumped inside

    def jump_factor(self, start: int, end: int) -> float | None:
        """How far the LR jumped inside the window (start, end]; None when it did not, or when
        the checkpoint at `start` holds no LR (its optimizer state was not read): the jump is
        then somewhere between an earlier checkpoint and `end`, not necessarily in this window."""
        if end not in self.jump_ends or start not in self.at_step:
            return None
        return self.at_step[end] / self.at_step[start]


def checkpoint_lr(evidence: Evidence) -> CheckpointLr:
    rates = _checkpoint_rates(evidence)
    jumps = frozenset(
        end
        for begin, end in itertools.pairwise(sorted(rates))
        if is_lr_jump(begin, end, rates[begin], rates[end])
    )
    return CheckpointLr(rates, jumps)


def update_windows(layers: pd.DataFrame, evidence: Evidence, lr: CheckpointLr) -> pd.DataFrame:
    """One row per (window end, tensor): the raw update ratio per step, and per unit of LR."""
    steps = sorted(layers["step"].unique().tolist())
    previous_step = dict(zip(steps[1:], steps[:-1], strict=False))
    rows = layers.dropna(subset=["update_ratio_per_step"]).copy()
    rows["window_start"] = rows["step"].map(previous_step)
    rates = lr.at_step
    # Checkpoints holding no LR: the mean of the LR the run logged over the window's steps.
    held = evidence.checkpoints.lr_by_step() if evidence.checkpoints is not None else {}
    logged = {} if held else _logged_window_lr(evidence, steps)
    # The LR in force over a window: the mean of its two checkpoints' LRs (one may be 0 at the
    # end of a decay; the mean is not), unknown across a jump (checkpoint_lr.is_lr_jump): the
    # window's updates ran at the old LR up to some step the checkpoints do not show, so the
    # mean (×10 the old LR for a ×20 jump) would shrink the window per unit of LR and make the
    # window before it look raised (issue 11: a ZeRO-3 run's LR ×20, checkpoints every 40).
    window_lr = {
        end: logged[end]
        if end in logged
        else np.nan
        if is_lr_jump(begin, end, rates[begin], rates[end])
        else 0.5 * (rates[end] + rates[begin])
        for begin, end in itertools.pairwise(steps)
        if end in logged or (begin in rates and end in rates)
    }
    rows["window_lr"] = rows["step"].map(window_lr)
    rows.loc[~(rows["window_lr"] > 0), "window_lr"] = np.nan
    rows["per_lr_ratio"] = rows["update_ratio_per_step"] / rows["window_lr"]
    return rows


def _checkpoint_rates(evidence: Evidence) -> dict[int, float]:
    """The LR at each checkpoint step: the one its optimizer state holds; when the checkpoints
    hold none (plain state dicts, an optimizer not read), the last one the run logged at or
    before the step (a Trainer under DeepSpeed logs it every step)."""
    rates = evidence.checkpoints.lr_by_step() if evidence.checkpoints is not None else {}
    if rates or not evidence.run.has(LEARNING_RATE) or evidence.checkpoints is None:
        return rates
    steps, values = evidence.run.series(LEARNING_RATE)
    finite = np.isfinite(values)
    steps, values = steps[finite], values[finite]
    out = {}
    for step in evidence.checkpoints.steps:
        index = int(np.searchsorted(steps, step, side="right")) - 1
        if index >= 0:
            out[step] = float(values[index])
    return out


def _logged_window_lr(evidence: Evidence, steps: list[int]) -> dict[int, float]:
    """Per window end: the mean LR the run logged over the window's steps (begin, end]."""
    if not evidence.run.has(LEARNING_RATE):
        return {}
    logged_steps, values = evidence.run.series(LEARNING_RATE)
    out = {}
    for begin, end in itertools.pairwise(steps):
        inside = (logged_steps > begin) & (logged_steps <= end) & np.isfinite(values)
        if inside.any():
            out[end] = float(values[inside].mean())
    return out
