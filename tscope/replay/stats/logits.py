"""Output-logit statistics: how large the model's next-token logits and log-partition grow.

Statistics in context.layers[output head] (e.g. "lm_head"), float32, over every position of the
step's micro-batches (positions whose attention_mask is 0 left out, when the batch has one):

    log_z_mean   mean over positions of log Z = logsumexp over the vocabulary of the logits
                 (nats). PaLM's z-loss (Chowdhery et al. 2022) and Wortsman et al. 2023 §3.2
                 keep it near 0; its drift away from 0 is "output logit divergence".
    log_z_max    the largest log Z of any position
    logit_max    the largest single logit
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tscope.model.replay_statistics import LOG_Z_MEAN, ReplayStatistic
from tscope.replay.observers import StepContext
from tscope.replay.stats.base import StatisticsObserver, first_tensor
from tscope.replay.stats.structure import output_head

if TYPE_CHECKING:
    import torch

LOGIT_MAX = "logit_max"
LOG_Z_MAX = "log_z_max"

# Rows per chunk are chosen so one float32 chunk of logits holds at most this many values (64 MiB).
CHUNK_ELEMENTS = 1 << 24


class OutputLogitStatistics(StatisticsObserver):
    name = "logits"
    statistics = (
        ReplayStatistic(LOGIT_MAX, "Largest output logit", "max logit of the LM head", False, True),
        ReplayStatistic(
            LOG_Z_MEAN, "Mean log Z", "mean log-sum-exp of the output logits", False, True
        ),
        ReplayStatistic(LOG_Z_MAX, "Largest log Z", "max log-sum-exp of the output logits", False),
    )

    def __init__(self) -> None:
        super().__init__()
        self._head_name = ""
        self._records: list[
            torch.Tensor
        ] = []  # (4,) per forward: Σ log Z, positions, max log Z, max
        self._context: StepContext | None = None

    def on_step_start(self, context: StepContext) -> None:
        super().on_step_start(context)
        self._records = []
        self._context = context
        head = output_head(context.model)
        if head is None:
            self.note(context, "no output head (get_output_embeddings() or lm_head) found")
            return
        self._head_name = head[0]
        self.forward_hook(head[1], self._record)

    def _record(self, module: torch.nn.Module, inputs: Any, output: Any) -> None:
        logits = first_tensor(output)
        if logits is None or not logits.is_floating_point() or logits.numel() == 0:
            return
        self._records.append(logit_sums(logits, self._padding(logits)))

    def _padding(self, logits: torch.Tensor) -> torch.Tensor | None:
        """The micro-batch's attention_mask when it covers exactly the logits' positions."""
        context = self._context
        if context is None or self._micro_index >= len(context.micro_batches):
            return None
        batch = context.micro_batches[self._micro_index]
        mask = batch.get("attention_mask") if isinstance(batch, Mapping) else None
        if mask is None or tuple(mask.shape) != tuple(logits.shape[:-1]):
            return None
        result: torch.Tensor = mask
        return result

    def on_step_end(self, context: StepContext) -> None:
        import torch

        super().on_step_end(context)
        self._context = None
        if not self._records:
            return
        sums = torch.stack(self._records)  # (forwards, 4)
        total, count = sums[:, 0].sum(), sums[:, 1].sum()
        summary = torch.stack([total / count, sums[:, 2].max(), sums[:, 3].max()])
        head = self._head_name
        self._records = []

        def receive(values: list[float]) -> None:
            mean, log_z_max, logit_max = values
            context.layers.setdefault(head, {}).update(
                {LOG_Z_MEAN: mean, LOG_Z_MAX: log_z_max, LOGIT_MAX: logit_max}
            )

        self.deliver(summary, receive)


def logit_sums(logits: torch.Tensor, keep: torch.Tensor | None = None) -> torch.Tensor:
    """(4,) float32: Σ log Z over kept positions, their count, max log Z, max logit.

    logits (..., V); keep (...) nonzero where a position counts. Chunked over positions so the
    float32 upcast of bf16 logits never exceeds CHUNK_ELEMENTS values.
    """
    import torch

    vocab = logits.shape[-1]
    flat = logits.detach().reshape(-1, vocab)  # (N, V)
    kept = keep.reshape(-1).to(torch.bool) if keep is not None else None  # (N,)
    rows = max(1, CHUNK_ELEMENTS // vocab)
    parts = []
    with torch.no_grad(), torch.autocast(logits.device.type, enabled=False):
        for start in range(0, flat.shape[0], rows):
            chunk = flat[start : start + rows].float()  # (c, V)
            log_z = torch.logsumexp(chunk, dim=-1)  # (c,)
            row_max = chunk.amax(dim=-1)  # (c,)
            if kept is None:
                count = torch.full((), float(log_z.numel()), device=log_z.device)
                total = log_z.sum()
            else:  # torch.where, not boolean indexing: no device sync for the result's size
                mask = kept[start : start + rows]
                count = mask.sum().float()
                total = torch.where(mask, log_z, 0.0).sum()
                log_z = torch.where(mask, log_z, -math.inf)
                row_max = torch.where(mask, row_max, -math.inf)
            parts.append(torch.stack([total, count, log_z.max(), row_max.max()]))
    stacked = torch.stack(parts)  # (chunks, 4)
    return torch.stack(
        [stacked[:, 0].sum(), stacked[:, 1].sum(), stacked[:, 2].max(), stacked[:, 3].max()]
    )
