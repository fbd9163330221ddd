"""The per-layer statistics a replay records (tscope.replay.stats): the record that describes one,
and the names the replay explainers read.

Each observer in tscope/replay/stats/ declares the statistics it writes (`statistics`: one
`ReplayStatistic` each, next to the code that measures it); tscope/replay/stats/registry.py
collects them in STEP_OBSERVERS order, and the case's replay section carries the descriptors of
the statistics it holds (`replay.statistics`), so the renderers title and scale a chart from the
case alone. The name constants below are the ones read outside the observer that writes them (the
explainers of analyzers/replay, the sharded loop): the contract both sides import. A statistic no
one else reads keeps its name in its observer's module.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass


@dataclass(frozen=True)
class ReplayStatistic:
    name: str
    title: str  # what the chart panel and the table call it
    unit: str  # what the number measures, in a few words
    log_preferred: bool  # norms and ratios span decades across layers: log axis when they do
    key: bool = False  # charted first, in the registry's order: where an instability shows first

    def to_dict(self) -> dict[str, object]:
        return {
            "name": self.name,
            "title": self.title,
            "unit": self.unit,
            "log_preferred": self.log_preferred,
            "key": self.key,
        }


# tscope/replay/stats/gradients.py
GRAD_NORM = "grad_norm"
UPDATE_RATIO = "update_ratio_per_step"
DELTA_NORM = "delta_norm"
WEIGHT_NORM = "weight_norm"
# tscope/replay/stats/activations.py
ACTIVATION_MAX_ABS = "activation_max_abs"
# tscope/replay/stats/attention.py
ATTENTION_LOGIT_MAX = "attention_logit_max"
# tscope/replay/stats/logits.py
LOG_Z_MEAN = "log_z_mean"
# tscope/replay/stats/router.py
EXPERT_TOKEN_FRACTION_MAX = "expert_token_fraction_max"
# tscope/replay/stats/nonfinite.py: 1.0 on the first module whose output or gradient is NaN/Inf
NONFINITE_FORWARD = "nonfinite_forward"
NONFINITE_BACKWARD = "nonfinite_backward"


def undeclared_statistic(name: str) -> ReplayStatistic:
    """A statistic no descriptor names (expert_share_007, one per expert; a case an older tscope
    wrote): titled from the name itself, linear axis, not charted first."""
    return ReplayStatistic(name, name.replace("_", " ").capitalize(), name, False)


def described(
    names: Iterable[str], declared: Iterable[ReplayStatistic]
) -> tuple[ReplayStatistic, ...]:
    """The descriptors of `names` among `declared`, in the declared order (names without one are
    left out: they render from `undeclared_statistic`)."""
    wanted = set(names)
    return tuple(statistic for statistic in declared if statistic.name in wanted)
