"""The Trainer's loss normaliser `num_items_in_batch`, as the producer's transformers computed it.

For a model whose forward takes `**kwargs`, Trainer counts the label tokens (labels != -100) of
all micro-batches of the optimizer step and passes the count N to every micro-batch's forward;
the model's loss is then Σ CE / N and the Trainer does not divide by the accumulation steps
(v5.24 trainer.py:2306-2367, 2112-2119). Which labels it counts changed with transformers
PR #46204 ("Fix num_items_in_batch over-counting for causal LM losses", merged 2026-05-26): since
then only `labels[..., 1:]` of causal-LM losses; before, every label, one more per row than the
loss predicts. The difference is a 1/T bias (1.6 % at T = 64), so the replay must use the
producer's rule, not the installed one.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# The first release the fixtures verify to count shifted labels (5.24.0 wrote them).
SHIFTED_COUNT_VERIFIED_FROM = (5, 24)
# PR #46204 was merged months after 5.0.0 (January 2026): every 4.x release counts all labels.
UNSHIFTED_COUNT_BEFORE = (5, 0)


@dataclass(frozen=True)
class NormaliserRule:
    passes_num_items: bool  # the model takes **kwargs: Trainer passes N and does not divide by GA
    counts_shifted: bool  # N counts labels[..., 1:] (post-#46204 rule for causal-LM losses)
    note: str  # how the rule was decided
    caveat: str = ""  # set when the producer's rule is assumed rather than known


def trainer_rule(
    model: torch.nn.Module, producer_version: str | None, override: bool | None
) -> NormaliserRule:
    passes = model_accepts_loss_kwargs(model)
    if not passes:
        note = "the model's forward takes no **kwargs: mean loss per micro-batch, divided by GA"
        return NormaliserRule(False, False, note)
    shifting_loss = loss_shifts_labels(model)
    if override is not None:
        return NormaliserRule(True, override, "token count convention set by the entry file")
    version = _version(producer_version)
    if version is not None and version < UNSHIFTED_COUNT_BEFORE:
        return NormaliserRule(True, False, f"transformers {producer_version}: counts every label")
    rule = "labels[..., 1:]" if shifting_loss else "every label (the loss is not ForCausalLMLoss)"
    note = f"transformers {producer_version or '?'}: counts {rule}"
    if version is not None and version >= SHIFTED_COUNT_VERIFIED_FROM:
        return NormaliserRule(True, shifting_loss, note)
    caveat = (
        f"the producer's transformers {producer_version or '(unknown version)'} may predate "
        "PR #46204; the replay assumes it counts labels[..., 1:] for causal-LM losses. If the "
        "replay misses the logged losses by about one token per row, set "
        "trainer_counts_shifted_labels = False in the entry file"
    )
    return NormaliserRule(True, shifting_loss, note, caveat if shifting_loss else "")


def model_accepts_loss_kwargs(model: Any) -> bool:
    """Trainer.__init__ (v5.24 trainer.py:517-523): the model's flag, else **kwargs in forward."""
    flag = getattr(model, "accepts_loss_kwargs", None)
    if isinstance(flag, bool):
        return flag
    try:
        parameters = inspect.signature(model.forward).parameters.values()
    except (TypeError, ValueError):
        return False
    return any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters)


def loss_shifts_labels(model: Any) -> bool:
    """Trainer._loss_shifts_labels (trainer.py:543): the model's loss_type maps to ForCausalLMLoss
    and it is not an encoder-decoder. GPT2LMHeadModel's loss_type is None: it does not."""
    try:
        from transformers.loss.loss_utils import LOSS_MAPPING, ForCausalLMLoss
    except ImportError:
        return False
    loss_type = getattr(model, "loss_type", None)
    if not isinstance(loss_type, str):  # None: the loss falls back, but is not "mapped"
        return False
    config = getattr(model, "config", None)
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    return LOSS_MAPPING.get(loss_type) is ForCausalLMLoss and not encoder_decoder


def num_items(micro_batches: Sequence[Any], shifted: bool) -> torch.Tensor:
    """N over all micro-batches of the step; a collator's `shift_labels` is counted as given."""
    counts = [
        batch["shift_labels"].ne(-100).sum()
        if "shift_labels" in batch
        else (batch["labels"][..., 1:] if shifted else batch["labels"]).ne(-100).sum()
        for batch in micro_batches
    ]
    total: torch.Tensor = sum(counts[1:], counts[0])
    return total


def _version(text: str | None) -> tuple[int, int] | None:
    match = re.match(r"^(\d+)\.(\d+)", text or "")
    return (int(match.group(1)), int(match.group(2))) if match else None
