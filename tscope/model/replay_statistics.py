"""The per-layer statistics a replay records (tscope.replay.stats), declared once: each name, and
for the charted ones what the report calls it, what it measures and its axis.

The observers write these names into each step's `layers` ({module: {name: value}}), the
explainers (analyzers/replay) read them, the renderers title and scale their charts with them.
Adding a statistic: its name and entry here, and the observer that computes it
(tscope/replay/stats/, registered in tscope/replay/stats/registry.py). A name without an entry
still renders, titled from the name itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ReplayStatistic:
    name: str
    title: str  # what the chart panel and the table call it
    unit: str  # what the number measures, in a few words
    log_preferred: bool  # norms and ratios span decades across layers: log axis when they do
    key: bool = False  # charted first, in this file's order: where an instability shows first


# tscope/replay/stats/gradients.py
GRAD_NORM = "grad_norm"
UPDATE_RATIO = "update_ratio_per_step"
DELTA_NORM = "delta_norm"
WEIGHT_NORM = "weight_norm"
# tscope/replay/stats/activations.py
ACTIVATION_MAX_ABS = "activation_max_abs"
ACTIVATION_MEAN = "activation_mean"
ACTIVATION_STD = "activation_std"
ACTIVATION_KURTOSIS = "activation_excess_kurtosis"
# tscope/replay/stats/attention.py
ATTENTION_LOGIT_MAX = "attention_logit_max"
# tscope/replay/stats/logits.py
LOGIT_MAX = "logit_max"
LOG_Z_MEAN = "log_z_mean"
LOG_Z_MAX = "log_z_max"
# tscope/replay/stats/router.py (with expert_share_NNN, one per expert, and router_top_k)
EXPERT_SHARE_MAX = "expert_share_max"
EXPERT_TOKEN_FRACTION_MAX = "expert_token_fraction_max"
ROUTER_TOP_K = "router_top_k"
# tscope/replay/stats/nonfinite.py: 1.0 on the first module whose output or gradient is NaN/Inf
NONFINITE_FORWARD = "nonfinite_forward"
NONFINITE_BACKWARD = "nonfinite_backward"

REPLAY_STATISTICS: tuple[ReplayStatistic, ...] = (
    ReplayStatistic(GRAD_NORM, "Gradient norm", "L2 norm of the layer's gradient", True, key=True),
    ReplayStatistic(
        UPDATE_RATIO, "Update-to-weight ratio", "‖Δw‖ / ‖w‖ of the step's update", True, key=True
    ),
    ReplayStatistic(
        ACTIVATION_MAX_ABS, "Largest activation", "max |output| of the module", False, key=True
    ),
    ReplayStatistic(
        ATTENTION_LOGIT_MAX,
        "Largest attention logit",
        "max pre-softmax q·k / √d",
        False,
        key=True,
    ),
    ReplayStatistic(LOGIT_MAX, "Largest output logit", "max logit of the LM head", False, key=True),
    ReplayStatistic(
        LOG_Z_MEAN, "Mean log Z", "mean log-sum-exp of the output logits", False, key=True
    ),
    ReplayStatistic(LOG_Z_MAX, "Largest log Z", "max log-sum-exp of the output logits", False),
    ReplayStatistic(ACTIVATION_MEAN, "Activation mean", "mean of the module's output", False),
    ReplayStatistic(ACTIVATION_STD, "Activation spread", "standard deviation of the output", False),
    ReplayStatistic(
        ACTIVATION_KURTOSIS,
        "Activation excess kurtosis",
        "heavy tails of the output; 0 for a Gaussian",
        False,
    ),
    ReplayStatistic(DELTA_NORM, "Update norm", "‖Δw‖ of the step's update", True),
    ReplayStatistic(WEIGHT_NORM, "Weight norm", "‖w‖ after the step", True),
)
STATISTICS_BY_NAME = {statistic.name: statistic for statistic in REPLAY_STATISTICS}
KEY_STATISTICS = tuple(statistic.name for statistic in REPLAY_STATISTICS if statistic.key)


def replay_statistic(name: str) -> ReplayStatistic:
    """The statistic's entry; a name without one (a statistic added later, expert_share_007)
    gets a title made from the name itself."""
    known = STATISTICS_BY_NAME.get(name)
    if known is not None:
        return known
    return ReplayStatistic(name, name.replace("_", " ").capitalize(), name, False)
