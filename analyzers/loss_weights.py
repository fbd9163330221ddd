"""A logged loss weight that ramps up: the objective itself changes, so the loss may rise.

A β-VAE with KL annealing logs `loss = recon + β·kl` with β ramped from 0 to 1: the total loss
rises from 1.8 to 4.2 while both terms behave (the KL falls, the reconstruction gives a little
back), and a healthy-run hunt (session 26) found it called a critical divergence. A rise of the
loss while a logged weight of one of its terms climbs is not the model breaking; the rules that
judge the loss's level (divergence, spikes) ask here first.

A loss weight is told by its name: `beta`, `kl_weight`, `*_weight`, `*_coef`, `lambda`, an
`anneal…` factor (never the optimizer's `weight_decay` or a `weight_norm`), logged as a series
that climbs (≥ RAMP_FACTOR× from where the loss was at its best, and non-decreasing for at least
MONOTONE_SHARE of its logged steps there): a schedule, not noise.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tscope.analyzers.signals import fmt
from tscope.model import Run

_LOSS_WEIGHT = re.compile(
    r"(?:^|[/_.\-])(?:beta|kl[_\-]?weight|\w*_weight|\w*_coef|coefficient|lambda|anneal\w*)$",
    re.IGNORECASE,
)
RAMP_FACTOR = 2.0
MONOTONE_SHARE = 0.9
MIN_POINTS = 5


@dataclass(frozen=True)
class WeightRamp:
    name: str
    before: float
    after: float

    def text(self) -> str:
        return (
            f" Meanwhile the logged loss weight {self.name} rose from {fmt(self.before)} to "
            f"{fmt(self.after)}: the objective itself changed (a term's weight annealed in), so "
            "its total can rise while the model learns; judge the terms' own series."
        )


@lru_cache(maxsize=64)
def loss_weight_names(metric_names: tuple[str, ...]) -> tuple[str, ...]:
    """The names among a run's series that name a loss weight (once per run: the spike rules
    ask for every spike)."""
    return tuple(name for name in metric_names if _LOSS_WEIGHT.search(name))


def rising_loss_weight(run: Run, start_step: int, end_step: int) -> WeightRamp | None:
    """The first logged loss weight that ramps up between the two steps, or None."""
    for name in loss_weight_names(tuple(run.metric_names)):
        steps, values = run.series(name)
        inside = (steps >= start_step) & (steps <= end_step) & np.isfinite(values)
        window = values[inside]
        if window.size < MIN_POINTS:
            continue
        first, last = float(window[0]), float(window[-1])
        climbing = float(np.mean(np.diff(window) >= 0)) >= MONOTONE_SHARE
        if climbing and last > 0 and last >= RAMP_FACTOR * max(first, 0.0):
            return WeightRamp(name, first, last)
    return None
