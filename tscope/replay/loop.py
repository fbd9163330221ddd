"""The replay's training loop: the producer's optimizer step, one step at a time.

Per step, as Trainer's inner loop does it (v5.24 trainer.py:1890-1950): every micro-batch's
forward and backward (the loss normalised by the step's token count N, so not divided by the
accumulation steps), the pre-clip gradient norm from clip_grad_norm_, optimizer.step(), and the
gradients set to None. The learning rates come from the plan; the step loss is the float32 sum of
the micro-batch losses, the value Trainer accumulates for its log.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from tscope.errors import UsageError
from tscope.model.replay import ReplayStep
from tscope.replay.entry import Entry
from tscope.replay.losses import DEFAULT_CAUSAL_LM, ENTRY_LOSS, micro_batch_loss
from tscope.replay.lr_source import LrPlan
from tscope.replay.normaliser import NormaliserRule, num_items
from tscope.replay.observers import Intervention, StepContext, StepObserver
from tscope.replay.rng import dataloader_epoch_draw

if TYPE_CHECKING:
    import torch

# (steps done, steps planned, the step just replayed)
ProgressCallback = Callable[[int, int, ReplayStep], None]


@dataclass
class LoopSettings:
    device: torch.device
    loss_path: str  # losses.MODEL_LOSS, ENTRY_LOSS or DEFAULT_CAUSAL_LM
    normaliser: NormaliserRule | None  # the Trainer's num_items_in_batch rule; None elsewhere
    max_grad_norm: float | None  # clip threshold; None: measure the norm, never clip
    steps_per_epoch: int | None = None  # mirror the DataLoader's RNG draw at each epoch start
    autocast_dtype: torch.dtype | None = None  # mixed precision the run trained with
    scaler: Any = None  # torch.amp.GradScaler restored from scaler.pt
    observers: Sequence[StepObserver] = field(default_factory=tuple)
    interventions: Sequence[Intervention] = field(default_factory=tuple)
    # Steps read from the LR plan at step − offset: a replay that feeds later batches to an
    # earlier state follows that state's own schedule (what-if "from").
    lr_step_offset: int = 0


def run_steps(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    entry: Entry,
    first: int,
    last: int,
    plan: LrPlan,
    settings: LoopSettings,
    on_step: ProgressCallback | None = None,
) -> tuple[list[ReplayStep], list[str]]:
    """Replay steps first..last; returns the steps and why any were not replayed."""
    records: list[ReplayStep] = []
    items = _batches(entry, first - 1)
    total = last - first + 1
    for step in range(first, last + 1):
        item = next(items, _END)
        if item is _END:
            return records, [f"steps {step}-{last}: batches() ended after step {step - 1}"]
        record = _one_step(model, optimizer, entry, step, item, plan, settings)
        records.append(record)
        if on_step is not None:
            on_step(len(records), total, record)
    return records, []


_END = object()


def _batches(entry: Entry, start_step: int) -> Iterator[Any]:
    try:
        return iter(entry.batches(start_step))
    except TypeError as error:
        raise UsageError(f"{entry.path}: batches({start_step}) returned no iterable.") from error


def _one_step(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    entry: Entry,
    step: int,
    item: Any,
    plan: LrPlan,
    settings: LoopSettings,
) -> ReplayStep:
    import torch

    started = time.perf_counter()
    for intervention in settings.interventions:
        item = intervention.batch(step, item)
    micro = [_to_device(b, settings.device) for b in (item if isinstance(item, list) else [item])]
    if not micro:
        raise UsageError(f"{entry.path}: batches() yielded an empty list for step {step}.")
    spe = settings.steps_per_epoch
    if spe and (step - 1) % spe == 0:
        dataloader_epoch_draw()
    rows = [_rows(b, entry) for b in micro]
    samples = sum(rows)
    n_items, n_alternative = _normalisers(micro, settings)
    lrs = _learning_rates(step - settings.lr_step_offset, plan, settings.interventions)
    for group, lr in zip(optimizer.param_groups, lrs, strict=False):
        group["lr"] = lr
    if any(intervention.skips_update(step) for intervention in settings.interventions):
        return _evaluate_only(model, entry, step, micro, lrs, n_items, samples, settings, started)
    context = StepContext(step, model, optimizer, micro, samples, n_items, lrs)
    for observer in settings.observers:
        observer.on_step_start(context)

    micro_losses = []
    for index, batch in enumerate(micro):
        with _autocast(settings):
            loss, per_sample = micro_batch_loss(
                settings.loss_path, model, batch, entry, n_items, samples, len(micro)
            )
        if per_sample.shape[0] != rows[index]:
            raise UsageError(
                f"{entry.path}: step {step} has {rows[index]} samples but {per_sample.shape[0]} "
                "per-sample losses; loss_fn must return one loss per row of the batch."
            )
        scaled = settings.scaler.scale(loss) if settings.scaler is not None else loss
        scaled.backward()
        micro_losses.append(loss.detach().float())
        context.per_sample_loss.append(per_sample)
        for observer in settings.observers:
            observer.on_micro_batch(context, index, per_sample)
    for observer in settings.observers:
        observer.on_backward(context)

    if settings.scaler is not None:
        settings.scaler.unscale_(optimizer)
    max_norm = settings.max_grad_norm
    for intervention in settings.interventions:
        max_norm = intervention.max_grad_norm(step, max_norm)
    grad_norm = _grad_norm(model, max_norm)
    if settings.scaler is not None:
        settings.scaler.step(optimizer)
        settings.scaler.update()
    else:
        optimizer.step()
    model.zero_grad(set_to_none=True)

    # One transfer per step: on a GPU every .item() would wait for the device.
    values = torch.stack(micro_losses).tolist()
    loss_value = _float32_sum(values)
    norm_value = float(grad_norm) if grad_norm is not None else None
    context.loss, context.grad_norm = loss_value, norm_value
    for observer in settings.observers:
        observer.on_step_end(context)
    per_sample_all = torch.cat([p.float().reshape(-1) for p in context.per_sample_loss]).tolist()
    alternative = None
    if n_items is not None and n_alternative is not None and float(n_alternative) > 0:
        alternative = loss_value * float(n_items) / float(n_alternative)
    return ReplayStep(
        step=step,
        loss=loss_value,
        grad_norm=norm_value,
        learning_rate=lrs[0],
        micro_losses=tuple(values),
        per_sample_loss=tuple(per_sample_all),
        layers=context.layers,
        extras=context.extras,
        samples=samples,
        num_items=float(n_items) if n_items is not None else None,
        alternative_loss=alternative,
        seconds=time.perf_counter() - started,
    )


def _evaluate_only(
    model: torch.nn.Module,
    entry: Entry,
    step: int,
    micro: list[Any],
    lrs: tuple[float, ...],
    n_items: torch.Tensor | None,
    samples: int,
    settings: LoopSettings,
    started: float,
) -> ReplayStep:
    """A skipped step: the batch's loss under the current weights, and no update at all."""
    import torch

    with torch.no_grad():
        losses = []
        per_sample = []
        for batch in micro:
            with _autocast(settings):
                loss, rows = micro_batch_loss(
                    settings.loss_path, model, batch, entry, n_items, samples, len(micro)
                )
            losses.append(loss.detach().float())
            per_sample.append(rows.detach().float().reshape(-1))
    values = torch.stack(losses).tolist()
    return ReplayStep(
        step=step,
        loss=_float32_sum(values),
        grad_norm=None,
        learning_rate=lrs[0],
        micro_losses=tuple(values),
        per_sample_loss=tuple(torch.cat(per_sample).tolist()),
        samples=samples,
        num_items=float(n_items) if n_items is not None else None,
        seconds=time.perf_counter() - started,
        update_skipped=True,
    )


def _normalisers(
    micro: list[Any], settings: LoopSettings
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """N for this step, and N under the other Trainer convention (for the mismatch diagnosis)."""
    rule = settings.normaliser
    if settings.loss_path == DEFAULT_CAUSAL_LM:
        return num_items(micro, shifted=True), None  # the token mean over the whole step
    if rule is None or not rule.passes_num_items:
        return None, None
    if settings.loss_path == ENTRY_LOSS and not all(_has_labels(b) for b in micro):
        return None, None
    return num_items(micro, rule.counts_shifted), num_items(micro, not rule.counts_shifted)


def _has_labels(batch: Any) -> bool:
    return isinstance(batch, Mapping) and ("labels" in batch or "shift_labels" in batch)


def _learning_rates(
    step: int, plan: LrPlan, interventions: Sequence[Intervention]
) -> tuple[float, ...]:
    lrs = plan.for_step(step)
    lr = lrs[0]
    for intervention in interventions:
        lr = intervention.learning_rate(step, lr)
    if lr == lrs[0]:
        return lrs
    # Other groups keep their ratio to group 0 (or follow it when group 0's rate was zero).
    return tuple(lr if lrs[0] == 0 else lr * (g / lrs[0]) for g in lrs)


def _grad_norm(model: torch.nn.Module, max_norm: float | None) -> torch.Tensor | None:
    import torch

    parameters = [p for p in model.parameters() if p.grad is not None]
    if not parameters:
        return None
    if max_norm is not None and max_norm > 0:
        # What accelerate's clip_grad_norm_ calls; it returns the norm before clipping.
        return torch.nn.utils.clip_grad_norm_(model.parameters(), max_norm)
    # Measured without touching the gradients (clipping at inf would multiply them by 1.0,
    # and a non-finite norm would turn every gradient into NaN).
    return torch.nn.utils.get_total_norm([p.grad for p in parameters if p.grad is not None])


def _float32_sum(values: list[float]) -> float:
    total = np.float32(0.0)
    with np.errstate(all="ignore"):
        for value in values:
            total = np.float32(total + np.float32(value))
    return float(total) if values else math.nan


def _autocast(settings: LoopSettings) -> Any:
    import contextlib

    import torch

    if settings.autocast_dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(settings.device.type, dtype=settings.autocast_dtype)


def _to_device(batch: Any, device: torch.device) -> Any:
    if hasattr(batch, "to") and hasattr(batch, "dim"):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {key: _to_device(value, device) for key, value in batch.items()}
    if isinstance(batch, (list, tuple)):
        return type(batch)(_to_device(value, device) for value in batch)
    return batch


def _rows(batch: Any, entry: Entry) -> int:
    """Samples in one micro-batch: the leading size of its first tensor."""
    if isinstance(batch, Mapping):
        preferred = [batch[k] for k in ("input_ids", "labels") if k in batch]
        candidates = preferred + list(batch.values())
    elif isinstance(batch, (list, tuple)):
        candidates = list(batch)
    else:
        candidates = [batch]
    for value in candidates:
        if hasattr(value, "dim") and value.dim() >= 1:
            return int(value.shape[0])
    raise UsageError(f"{entry.path}: a batch from batches() holds no tensor to count samples in.")
