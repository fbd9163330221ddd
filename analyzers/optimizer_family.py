"""Which optimizer family a run trained with, from what its files say (None when they do not).

The learning-rate ranges and the no-warm-up rule (lr_config.TYPICAL_LR, warmup_stall) are
sourced for Adam-style optimizers (AdamW in every source). SGD, Adagrad, RMSprop and Adafactor
run at other scales (SGD at 0.1-1, Adagrad without warm-up by design): judging them against
AdamW's ranges warned healthy helper-made runs (Adagrad at 0.02 "started at its peak, no
warm-up"; SGD at 0.3 "×30 too high"). Those rules apply when the family is Adam or unknown.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tscope.analyzers.base import Evidence

ADAM = "adam"  # Adam, AdamW, and the Adam-style optimizers (Lion, LAMB) that keep betas
# torch.optim param-group keys only one family has (the group's hyper-parameters are saved
# with every optimizer state), checked in this order.
_GROUP_KEYS = (
    ("adafactor", ("relative_step", "scale_parameter", "decay_rate")),
    ("adagrad", ("lr_decay", "initial_accumulator_value")),
    ("rmsprop", ("centered",)),
    ("sgd", ("dampening", "nesterov")),
    (ADAM, ("betas",)),
)
# Config values (the Trainer's `optim`, a loop's `optimizer`), by the word they start with.
_CONFIG_KEYS = ("optim", "optimizer", "optimizer.name", "optim.name", "optimizer_name")
_CONFIG_WORDS = (
    ("adafactor", "adafactor"),
    ("adagrad", "adagrad"),
    ("rmsprop", "rmsprop"),
    ("sgd", "sgd"),
    ("adam", ADAM),
    ("lion", ADAM),
    ("lamb", ADAM),
)


def optimizer_family(evidence: Evidence) -> str | None:
    """The family the checkpoints' param groups show, else the one the config names."""
    if evidence.checkpoints is not None:
        for snapshot in evidence.checkpoints.snapshots:
            family = _from_groups(snapshot.param_groups)
            if family is not None:
                return family
    for key in _CONFIG_KEYS:
        value = evidence.run.config.get(key)
        if isinstance(value, str):
            word = value.strip().lower()
            for prefix, family in _CONFIG_WORDS:
                if word.startswith(prefix):
                    return family
    return None


def adam_or_unknown(evidence: Evidence) -> bool:
    """Whether AdamW's sourced ranges and warm-up rules may be applied."""
    return optimizer_family(evidence) in (ADAM, None)


def _from_groups(groups: tuple[Mapping[str, Any], ...]) -> str | None:
    for group in groups:
        for family, keys in _GROUP_KEYS:
            if any(key in group for key in keys):
                return family
    return None
