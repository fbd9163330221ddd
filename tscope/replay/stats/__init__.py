"""What a replay measures at each step, one observer per family (tscope.replay.observers).

    from tscope.replay.stats import statistics_observers
    observers = statistics_observers(model)          # every statistic that applies to the model

- gradients    per-tensor and per-block grad norms (pre-clip), weight norms, update-to-weight
               ratios
- activations  mean / std / max |x| / excess kurtosis of each transformer block's output
- attention    the largest pre-softmax attention logit of each attention layer
- logits       mean and max log-partition, max logit of the output head
- router       each expert's share of routed tokens, per mixture-of-experts router
- nonfinite    the first module whose forward or backward produced NaN/Inf

All of them only read: a replay with every statistic on reproduces the same losses and weights
bit for bit. Each module's docstring defines its statistics (names, units, where measured).
"""

from __future__ import annotations

from tscope.replay.stats.base import NOTES_KEY, StatisticsObserver
from tscope.replay.stats.registry import OBSERVER_NAMES, STEP_OBSERVERS, statistics_observers

__all__ = [
    "NOTES_KEY",
    "OBSERVER_NAMES",
    "STEP_OBSERVERS",
    "StatisticsObserver",
    "statistics_observers",
]
