"""The kind of training a run is, from what it left: preference optimization, LoRA / adapters,
from scratch (pre-training) or from a pretrained model (fine-tune), each piece named.

- preference optimization (DPO and kin): TRL's `rewards/chosen` / `logps/chosen` series;
- LoRA / PEFT: a config key naming `lora`, `peft` or an adapter (`adapter_config.json`, the
  peft fields in training arguments), or `lora` as a word in the run's name;
- from scratch or from a pretrained model: the loss's starting level, when the log starts at the
  beginning of training. A fresh LM predicts close to uniformly, so it starts near ln(vocab); a
  pretrained one starts far below. Judged against ln(vocab) when the config names the
  vocabulary, else against absolute levels (real tokenizers have ≥ 32k tokens, ln ≥ 10.4).

The LR rules judge the peak LR against the kind (lr_config), the no-warm-up stall rule leaves
fine-tunes out (warmup_stall), and a flat loss from a pretrained start is no plateau warning when
the LR and the gradients flow (plateau).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np

from tscope.analyzers.signals import fmt, loss_series, primary_loss
from tscope.model import Run
from tscope.model.checkpoint import CheckpointEvidence

# The loss's start is read only when the log starts within this many steps of step 0 (an excerpt
# from mid-run, e.g. a Megatron log from iteration 29,000, says nothing about the start).
START_MAX_STEP = 50
# From scratch: the start is ≥ 75% of ln(vocab); pretrained: ≤ 50% of it (a fresh model sits at
# ln(vocab) within a few %; fine-tunes in shared/realdata start at 0.3–2.3 nats with 32k–51k
# vocabularies, ≤ 22% of ln(vocab)).
SCRATCH_FRACTION = 0.75
PRETRAINED_FRACTION = 0.5
# Without a vocabulary size: ≥ 7 nats is from scratch (ln 1100, below every real tokenizer's
# ln(vocab)); ≤ 4 nats is a pretrained model.
SCRATCH_NATS = 7.0
PRETRAINED_NATS = 4.0
# ...judged so only on a loss logged before the first updates have moved it: a fresh model with
# a small vocabulary (bytes, characters) falls to its unigram level, ~3 nats (English bytes: 4.2
# bits), within ten steps (a helper-made Lightning byte-level run logged first at step 9: 3.03
# nats, read "pretrained"). Logged later (up to START_MAX_STEP), a loss of at most 2 nats, well
# under any unigram level, still is a pretrained start (whisper-large-v2-ja in shared/realdata,
# first logged at step 25 well under 2 nats).
PRETRAINED_NATS_MAX_STEP = 1
PRETRAINED_NATS_LATE = 2.0
VOCAB_KEYS = ("model_config.vocab_size", "vocab_size", "padded_vocab_size", "model.vocab_size")
_PREFERENCE_METRICS = ("rewards/chosen", "logps/chosen", "rewards/margins")
_ADAPTER_KEY = re.compile(r"(^|[._/])(lora|peft|adapter)([._/]|_|$)|^lora_|^peft_", re.IGNORECASE)
_LORA_WORD = re.compile(r"(^|[^a-z])q?lora([^a-z]|$)", re.IGNORECASE)


@dataclass(frozen=True)
class TrainingKind:
    kind: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class Vocabulary:
    size: int
    source: str  # where the size was read, for the message: "vocab 256" or "vocab 256, the ..."


def vocabulary(run: Run, checkpoints: CheckpointEvidence | None = None) -> Vocabulary | None:
    """The vocabulary size: the config's (VOCAB_KEYS), else the rows of the token embedding in
    the checkpoints (a plain loop saving state dicts names no vocabulary anywhere else: a blind
    set's byte-level OPT run, session 28, ended at 92% of ln 256 and was never judged from
    scratch)."""
    size = config_number(run, VOCAB_KEYS)
    if size is not None and size >= 2:
        return Vocabulary(int(size), f"vocab {int(size)}")
    for snapshot in checkpoints.snapshots if checkpoints is not None else ():
        if snapshot.token_embedding is not None:
            name, rows = snapshot.token_embedding
            return Vocabulary(rows, f"vocab {rows}, the rows of {name} in {snapshot.info.path}")
    return None


def training_kind(run: Run, checkpoints: CheckpointEvidence | None = None) -> TrainingKind | None:
    names = run.metric_names
    if any(name.endswith(m) for name in names for m in _PREFERENCE_METRICS):
        return TrainingKind(
            "preference", ("TRL preference metrics (rewards/chosen, logps/chosen)",)
        )
    reasons: list[str] = []
    adapter_keys = [
        k for k, v in run.config.items() if _ADAPTER_KEY.search(k) and v not in (None, "", False)
    ]
    if adapter_keys:
        reasons.append(f"adapter settings in the config ({', '.join(sorted(adapter_keys)[:3])})")
    elif _LORA_WORD.search(run.name):
        reasons.append(f"'lora' in the run's name ({run.name})")
    start = _start_kind(run, vocabulary(run, checkpoints))
    if start is not None and start[0] == "pre_training":
        if reasons:
            return None  # an adapter on a model that starts from scratch: contradictory
        return TrainingKind("pre_training", (start[1],))
    if reasons:
        return TrainingKind("lora", tuple(reasons) + ((start[1],) if start else ()))
    if start is not None:
        return TrainingKind("fine_tune", (start[1],))
    return None


def _start_kind(run: Run, vocab: Vocabulary | None) -> tuple[str, str] | None:
    loss = primary_loss(run)
    if loss is None:
        return None
    steps, values = loss_series(run, loss)
    finite = np.isfinite(values)
    if not finite.any() or steps[0] > START_MAX_STEP:
        return None
    # The first logged loss: a fresh model sits at ln(vocab) only before its first updates (at a
    # high LR the loss is 25% lower five steps in, which a median of the first points took for a
    # pretrained start).
    start = float(values[finite][0])
    if vocab is not None:
        ceiling = math.log(vocab.size)
        said = f"the loss starts at {fmt(start)} nats, {start / ceiling:.0%} of ln({vocab.source})"
        if start >= SCRATCH_FRACTION * ceiling:
            return "pre_training", said
        if start <= PRETRAINED_FRACTION * ceiling:
            return "fine_tune", said
        return None
    if start >= SCRATCH_NATS:
        return (
            "pre_training",
            f"the loss starts at {fmt(start)} nats (≥ {SCRATCH_NATS:g}: from scratch)",
        )
    bound = PRETRAINED_NATS_LATE if steps[0] > PRETRAINED_NATS_MAX_STEP else PRETRAINED_NATS
    if start <= bound:
        return ("fine_tune", f"the loss starts at {fmt(start)} nats (≤ {bound:g}: pretrained)")
    return None


def config_number(run: Run, keys: tuple[str, ...]) -> float | None:
    for key in keys:
        value = run.config.get(key)
        try:
            number = float(value)  # type: ignore[arg-type]
        except (TypeError, ValueError):
            continue
        if math.isfinite(number) and number > 0:
            return number
    return None


def untrained_level(run: Run, checkpoints: CheckpointEvidence | None = None) -> float | None:
    """ln(vocab) for a run trained from scratch (its loss started near it), else None."""
    vocab = vocabulary(run, checkpoints)
    kind = training_kind(run, checkpoints) if vocab is not None else None
    if vocab is None or kind is None or kind.kind != "pre_training":
        return None
    return math.log(vocab.size)
