"""The registry of replay statistics: every observer tscope.replay.stats provides, by name.

observers = statistics_observers(model)                 # all that apply to this model
observers = statistics_observers(model, names=("gradients", "attention"))
replay(run_dir, around=145, entry="entry.py", observers=observers)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tscope.errors import UsageError
from tscope.model.replay_statistics import ReplayStatistic
from tscope.replay.stats.activations import ActivationStatistics
from tscope.replay.stats.attention import AttentionLogits
from tscope.replay.stats.base import ObserverOptions, StatisticsObserver
from tscope.replay.stats.gradients import GradientStatistics
from tscope.replay.stats.logits import OutputLogitStatistics
from tscope.replay.stats.nonfinite import NonfiniteOrigin
from tscope.replay.stats.router import RouterShares

if TYPE_CHECKING:
    import torch

# In the order they run at each hook point. Gradients first: its on_backward copies the weights
# before any other observer allocates.
STEP_OBSERVERS: tuple[type[StatisticsObserver], ...] = (
    GradientStatistics,
    ActivationStatistics,
    AttentionLogits,
    OutputLogitStatistics,
    RouterShares,
    NonfiniteOrigin,
)
OBSERVER_NAMES = tuple(kind.name for kind in STEP_OBSERVERS)
# Every statistic the observers describe, in their order: the key ones are charted in this order.
REPLAY_STATISTICS: tuple[ReplayStatistic, ...] = tuple(
    statistic for kind in STEP_OBSERVERS for statistic in kind.statistics
)
_twice = sorted(name for name, n in Counter(s.name for s in REPLAY_STATISTICS).items() if n > 1)
if _twice:
    raise AssertionError(f"replay statistic declared twice: {', '.join(_twice)}")


def statistics_observers(
    model: torch.nn.Module,
    config: Any = None,
    names: Sequence[str] | None = None,
    *,
    grad_scaler: Any = None,
    update_ratio: bool = True,
) -> list[StatisticsObserver]:
    """The observers named (default: all) that apply to `model`, ready for replay(observers=...).

    `config`: the model's config when `model.config` is missing (an entry's build_model config);
    `grad_scaler`: the restored torch.amp.GradScaler, so gradient norms are unscaled;
    `update_ratio=False` skips the weight snapshot (one copy of the trainable weights).
    """
    wanted = list(OBSERVER_NAMES if names is None else names)
    unknown = [name for name in wanted if name not in OBSERVER_NAMES]
    if unknown:
        raise UsageError(
            f"Unknown replay statistic {', '.join(map(repr, unknown))}; valid ones: "
            f"{', '.join(OBSERVER_NAMES)}."
        )
    options = ObserverOptions(config=config, grad_scaler=grad_scaler, update_ratio=update_ratio)
    observers: list[StatisticsObserver] = []
    for kind in STEP_OBSERVERS:
        if kind.name not in wanted:
            continue
        observer = kind.for_replay(options)
        if observer.applies(model):
            observers.append(observer)
    return observers
