"""What-if replays: the same steps with one thing changed, to test a cause.

    specs = [parse_what_if(text) for text in ("skip", "lr=0.02", "clip=1.0", "from=60")]

- `skip`: drop the samples the baseline replay flagged (bad_samples) from their batches, or, when
  none were flagged, skip the update of the spike step's batch (what a restart with a skip list
  does);
- `lr=F`: multiply the learning rate by F on every step of the window;
- `clip=C`: clip the gradient norm at C on every step of the window;
- `from=STEP`: restore the newest checkpoint at or before STEP and feed it the window's batches
  directly — PaLM's test of bad data against bad state (Chowdhery et al. 2022, §5.1): a batch that
  spikes from any state is bad data; one that spikes only from this state is bad state.

Each what-if is a full replay from its checkpoint; a judgement of its outcome lives in
`tscope.analyzers.replay` (pure, no torch).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from tscope.errors import UsageError
from tscope.model.replay import BadSample
from tscope.replay.observers import Intervention

WHAT_IF_NAMES = ("skip", "lr", "clip", "from")


@dataclass(frozen=True)
class WhatIf:
    name: str  # one of WHAT_IF_NAMES
    value: float | None = None  # lr factor, clip threshold, or the `from` step
    text: str = ""  # as the user wrote it

    @property
    def params(self) -> dict[str, Any]:
        if self.name == "from":
            return {"from_step": int(self.value or 0)}
        if self.name == "lr":
            return {"lr_factor": self.value}
        if self.name == "clip":
            return {"max_grad_norm": self.value}
        return {}


def parse_what_if(text: str) -> WhatIf:
    name, _, value = text.strip().partition("=")
    name = name.strip().lower()
    if name not in WHAT_IF_NAMES:
        raise UsageError(
            f"Unknown --what-if {text!r}; use skip, lr=FACTOR, clip=MAX_NORM or from=STEP."
        )
    if name == "skip":
        if value:
            raise UsageError(
                f"--what-if {text!r}: skip takes no value (it uses the flagged samples)."
            )
        return WhatIf("skip", None, text)
    try:
        number = float(value)
    except ValueError:
        raise UsageError(f"--what-if {text!r}: {name} needs a number, e.g. {name}=0.5.") from None
    if name == "from":
        if number < 0 or number != int(number):
            raise UsageError(f"--what-if {text!r}: from needs a step number, e.g. from=60.")
    elif number <= 0:
        raise UsageError(f"--what-if {text!r}: {name} must be positive.")
    return WhatIf(name, number, text)


@dataclass
class ScaleLearningRate(Intervention):
    factor: float
    first: int
    last: int
    name = "lr"

    @property
    def params(self) -> dict[str, Any]:
        return {"lr_factor": self.factor, "steps": [self.first, self.last]}

    def learning_rate(self, step: int, lr: float) -> float:
        return lr * self.factor if self.first <= step <= self.last else lr


@dataclass
class ClipGradients(Intervention):
    max_norm: float
    first: int
    last: int
    name = "clip"

    @property
    def params(self) -> dict[str, Any]:
        return {"max_grad_norm": self.max_norm, "steps": [self.first, self.last]}

    def max_grad_norm(self, step: int, max_norm: float | None) -> float | None:
        if not self.first <= step <= self.last:
            return max_norm
        return self.max_norm if max_norm is None else min(max_norm, self.max_norm)


@dataclass
class SkipSamples(Intervention):
    """Drop rows (indices over the step's micro-batches concatenated) from the listed steps."""

    rows: dict[int, list[int]]
    name = "skip"

    @property
    def params(self) -> dict[str, Any]:
        return {"samples": {str(step): list(rows) for step, rows in sorted(self.rows.items())}}

    def batch(self, step: int, item: Any) -> Any:
        drop = set(self.rows.get(step, ()))
        if not drop:
            return item
        micro = item if isinstance(item, list) else [item]
        kept, offset = [], 0
        for batch in micro:
            size = _rows(batch)
            keep = [i for i in range(size) if offset + i not in drop]
            offset += size
            if keep:
                kept.append(_select_rows(batch, keep, size))
        if not kept:
            raise UsageError(f"--what-if skip would drop every sample of step {step}.")
        return kept if isinstance(item, list) else kept[0]


@dataclass
class SkipUpdates(Intervention):
    steps: list[int] = field(default_factory=list)
    name = "skip"

    @property
    def params(self) -> dict[str, Any]:
        return {"skipped_steps": list(self.steps)}

    def skips_update(self, step: int) -> bool:
        return step in self.steps


def skip_intervention(bad_samples: tuple[BadSample, ...], spike_step: int) -> Intervention:
    if bad_samples:
        rows: dict[int, list[int]] = {}
        for sample in bad_samples:
            rows.setdefault(sample.step, []).append(sample.index)
        return SkipSamples({step: sorted(set(r)) for step, r in rows.items()})
    return SkipUpdates([spike_step])


def window_intervention(what_if: WhatIf, first: int, last: int) -> Intervention:
    if what_if.name == "lr":
        return ScaleLearningRate(float(what_if.value or 1.0), first, last)
    if what_if.name == "clip":
        return ClipGradients(float(what_if.value or 1.0), first, last)
    raise ValueError(f"{what_if.name} is not a window intervention")


def _rows(batch: Any) -> int:
    if isinstance(batch, Mapping):
        for value in batch.values():
            shape = getattr(value, "shape", None)
            if shape is not None and len(shape) > 0:
                return int(shape[0])
    raise UsageError(
        "--what-if skip needs dict batches of tensors (rows on the first dimension) to drop rows."
    )


def _select_rows(batch: Any, keep: list[int], size: int) -> Any:
    import torch

    index = torch.tensor(keep, dtype=torch.long)
    selected = {}
    for key, value in batch.items():
        shape = getattr(value, "shape", None)
        if shape is not None and len(shape) > 0 and int(shape[0]) == size:
            selected[key] = value.index_select(0, index.to(value.device))
        else:
            selected[key] = value
    return selected
