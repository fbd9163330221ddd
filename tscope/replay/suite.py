"""Every per-layer statistic of tscope.replay.stats, built on the replay's model at its first step.

The replay builds the model itself (from the checkpoint), so the statistics observers, which need
the model to find blocks, attention and routers, are created when the first step starts and then
called in the registry's order. Their step-end tensors reach the host in one transfer
(stats.base.HostTransfer): one device sync per step for all of them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from tscope.replay.observers import StepContext, StepObserver
from tscope.replay.stats.base import HostTransfer, StatisticsObserver

if TYPE_CHECKING:
    from tscope.replay.entry import Entry
    from tscope.replay.loop import LoopSettings


class StatisticsSuite(StepObserver):
    def __init__(self, names: Sequence[str] | None = None) -> None:
        self.names = names
        self.observers: list[StepObserver] = []
        self._settings: LoopSettings | None = None
        self._built = False
        self.host = HostTransfer()  # `.transfers` counts the device syncs the statistics made

    def bind(self, entry: Entry, settings: LoopSettings) -> None:
        self._settings = settings

    def _build(self, model: Any) -> None:
        from tscope.replay.stats import statistics_observers

        scaler = self._settings.scaler if self._settings is not None else None
        self.observers = list(statistics_observers(model, names=self.names, grad_scaler=scaler))
        for observer in self.observers:
            if isinstance(observer, StatisticsObserver):
                observer.host = self.host
        self._built = True

    def on_step_start(self, context: StepContext) -> None:
        if not self._built:
            self._build(context.model)
        for observer in self.observers:
            observer.on_step_start(context)

    def on_micro_batch(self, context: StepContext, index: int, per_sample: Any) -> None:
        for observer in self.observers:
            observer.on_micro_batch(context, index, per_sample)

    def on_backward(self, context: StepContext) -> None:
        for observer in self.observers:
            observer.on_backward(context)

    def on_step_end(self, context: StepContext) -> None:
        for observer in self.observers:
            observer.on_step_end(context)
        self.host.run()

    def close(self) -> None:
        """Remove every hook and wrapper the statistics installed (also after a failed step)."""
        for observer in self.observers:
            close = getattr(observer, "close", None)
            if callable(close):
                close()

    @property
    def notes(self) -> list[str]:
        """What the statistics could not measure, one line each."""
        return [
            f"{getattr(observer, 'name', 'statistics')}: {note}"
            for observer in self.observers
            for note in getattr(observer, "notes", [])
        ]
