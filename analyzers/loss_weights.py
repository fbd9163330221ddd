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

from dataclasses import dataclass
from functools import lru_cache

import numpy as np

from tscope.analyzers.signals import fmt
from tscope.model import Run

# The name patterns, read as a regular expression:
#   (?:^|[/_.-])(?:beta|kl[_-]?weight|\w*_weight|\w*_coef|coefficient|lambda|anneal\w*)$
# matched by hand, in one pass over the name's last word: as a `re` pattern it backtracked
# quadratically on a run of `_` (27 ms per 1,000-character name; a crafted CSV header of 1,100
# such columns spent 28 s in it, red team, session 29).
_SEPARATORS = "/_.-"
_WHOLE_WORDS = ("beta", "klweight", "kl_weight", "kl-weight", "coefficient", "lambda")
_WORD_SUFFIXES = ("_weight", "_coef")
_PREFIX_WORD = "anneal"
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
    return tuple(name for name in metric_names if names_a_loss_weight(name))


def names_a_loss_weight(name: str) -> bool:
    """Whether `name` ends in a loss weight's name that begins the name or follows a
    separator (linear in the name's length)."""
    lower = name.lower()
    if any(
        lower.endswith(word) and (len(lower) == len(word) or lower[-len(word) - 1] in _SEPARATORS)
        for word in _WHOLE_WORDS
    ):
        return True
    # The trailing run of word characters (`\w`) and whether a token may begin at its start.
    start = len(lower)
    while start > 0 and (lower[start - 1].isalnum() or lower[start - 1] == "_"):
        start -= 1
    open_start = start == 0 or lower[start - 1] in _SEPARATORS
    for suffix in _WORD_SUFFIXES:
        # `\w*_weight`: some token start inside the run before the suffix; past the run's
        # own start, a token begins only after an `_`.
        if lower.endswith(suffix) and len(lower) - len(suffix) >= start:
            body = lower[start : len(lower) - len(suffix)]
            if open_start or "_" in body:
                return True
    position = lower.find(_PREFIX_WORD, start)
    while position != -1:  # `anneal\w*`: the run continues to the end by construction
        if (position == start and open_start) or (position > start and lower[position - 1] == "_"):
            return True
        position = lower.find(_PREFIX_WORD, position + 1)
    return False


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
