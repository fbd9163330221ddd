"""Canonical metric names: every producer's spelling mapped to one name, the original kept.

`canonical_metric(name)` maps one name; `canonical_metrics(names)` maps the names one file or
table logs together (some spellings mean the loss only when a better one is absent), and
`metric_preference` ranks the spellings that compete for one canonical name
(`table_columns.unique_metric_names` keeps the best one; the others keep their own names).

Where each training stack's spellings come from (read in the producers' source, 2026-12-02):

| stack | loss | eval loss | learning rate | grad norm | loss scale / skipped |
| --- | --- | --- | --- | --- | --- |
| torchtitan (components/metrics.py, optimizer/lr_scheduler.py) | `loss_metrics/global_avg_loss` (`…/global_max_loss` is the worst rank's, not the loss) | `validation_metrics/loss` | `lr` (older), `lr/<Optimizer>`, `lr/<Optimizer>/0` | `grad_norm` | |
| OLMo (olmo/train.py, olmo/eval/evaluator.py) | `train/CrossEntropyLoss` | `eval/<set>/CrossEntropyLoss` (one per set: kept) | `optim/learning_rate_group0` | `optim/total_grad_norm` | |
| OLMo-core (train/common.py, transformer/train_module.py) | `train/CE loss` | `eval/lm/<set>/CE loss` (kept) | `optim/LR (group 0)` | `optim/total grad norm` | `optim/step skipped` |
| Composer, llm-foundry (trainer.py, callbacks/lr_monitor.py, optimizer_monitor.py) | `loss/train/total` | `metrics/eval/LanguageCrossEntropy` | `lr-<Optimizer>/group0` | `l2_norm/grad/global` | |
| MaxText (trainers/pre_train/train.py, common/metric_logger.py) | `learning/loss` | `eval/avg_loss` | `learning/current_learning_rate` | `learning/raw_grad_norm` (before clipping), `learning/grad_norm` (after) | |
| NeMo 1/2 (megatron_gpt_model.py, lightning/megatron_strategy.py, optim/base.py) | `reduced_train_loss` | `val_loss` | `lr` | `grad_norm` | `loss_scale` |
| Megatron-LM TensorBoard (training/training.py) | `lm loss` | `lm loss validation` | `learning-rate` | `grad-norm` | `loss-scale` |
| Megatron-DeepSpeed TensorBoard and W&B (BigScience, AuroraGPT; megatron/training.py) | `lm-loss-training/lm loss` | `lm-loss-validation/lm loss validation` | `learning-rate/learning-rate` | `grad-norm/grad-norm` | `loss-scale/loss-scale` |
| DeepSpeed monitor (runtime/engine.py; x-axis: samples; TensorBoard only) | `Train/Samples/train_loss` | | `Train/Samples/lr` | | `Train/Samples/loss_scale` |
| fairseq (fairseq_cli/train.py, logging/progress_bar.py) | `loss` in `train_inner/` | `loss` in `valid/` | `lr` | `gnorm` | `loss_scale` |
| Levanter (callbacks/_metrics.py, tracker/helpers.py, analysis/tree_stats.py, eval.py) | `train/loss` | `eval/loss` | `optim/learning_rate` | `grad/norm/total` | `optim/skipped_step` |
| nanotron (trainer.py) | `lm_loss` | | `lr` | `grad_norm` | |
| Keras TensorBoard callback (callbacks/tensorboard.py) | `batch_loss` (the epoch's running mean: per-batch values recovered by readers/keras_running_mean.py), else `epoch_loss` in `train/` | `epoch_loss` in `validation/` | `epoch_learning_rate` (per epoch) | | |
| torchtune, litgpt, TRL, Axolotl, HF Trainer | `loss` | `val_loss`, `eval_loss` | `lr`, `learning_rate` | `grad_norm` | |

The directory-named splits (fairseq, Keras) are resolved by the TensorBoard reader
(`readers/tensorboard_tags.py`). accelerate's trackers log whatever names the user passes.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from tscope.model.metric_names import (
    EVAL_LOSS,
    GRAD_NORM,
    LEARNING_RATE,
    LOSS,
    LOSS_SCALE,
    SKIPPED_STEPS,
)

# Keys are normalized first: lower-cased, spaces/dashes to underscores, one "train/" prefix dropped.
_CANONICAL = {
    "loss": LOSS,
    "train_loss": LOSS,
    "lm_loss": LOSS,
    "training_loss": LOSS,
    "loss_step": LOSS,
    "train_loss_step": LOSS,
    "grad_norm": GRAD_NORM,
    "gradient_norm": GRAD_NORM,
    "grad_norm_total": GRAD_NORM,
    "global_grad_norm": GRAD_NORM,
    "total_grad_norm": GRAD_NORM,
    # a plain loop logging clip_grad_norm_'s return value (`total_norm`) under a `grad/` group
    "grad/total_norm": GRAD_NORM,
    "grad/norm": GRAD_NORM,
    "learning_rate": LEARNING_RATE,
    "lr": LEARNING_RATE,
    "lr_group_0": LEARNING_RATE,
    "lr_adamw": LEARNING_RATE,
    "eval_loss": EVAL_LOSS,
    "val_loss": EVAL_LOSS,
    "valid_loss": EVAL_LOSS,  # fairseq's JSON log prefixes a validation key with its subset
    "validation_loss": EVAL_LOSS,
    "eval/loss": EVAL_LOSS,
    "val/loss": EVAL_LOSS,
    "valid/loss": EVAL_LOSS,  # fairseq's W&B tags (`valid/loss`)
    "validation/loss": EVAL_LOSS,
    "eval/lm_loss": EVAL_LOSS,
    "val/lm_loss": EVAL_LOSS,
    "lm_loss_validation": EVAL_LOSS,
    "loss_scale": LOSS_SCALE,
    "skipped_iterations": SKIPPED_STEPS,
    "number_of_skipped_iterations": SKIPPED_STEPS,
    "skipped_steps": SKIPPED_STEPS,
    # torchtitan: the mean over data-parallel ranks; `loss_metrics/global_max_loss` stays apart.
    "loss_metrics/global_avg_loss": LOSS,
    "validation_metrics/loss": EVAL_LOSS,
    # OLMo and OLMo-core ("train/" dropped by the normalization).
    "crossentropyloss": LOSS,
    "ce_loss": LOSS,
    "optim/total_grad_norm": GRAD_NORM,
    "optim/learning_rate_group0": LEARNING_RATE,
    "optim/lr_(group_0)": LEARNING_RATE,
    "optim/step_skipped": SKIPPED_STEPS,
    # Composer / llm-foundry.
    "loss/train/total": LOSS,
    "l2_norm/grad/global": GRAD_NORM,
    "metrics/eval/languagecrossentropy": EVAL_LOSS,
    # MaxText.
    "learning/loss": LOSS,
    "learning/current_learning_rate": LEARNING_RATE,
    "learning/raw_grad_norm": GRAD_NORM,
    "learning/grad_norm": GRAD_NORM,
    "eval/avg_loss": EVAL_LOSS,
    # NeMo: the loss averaged over the data-parallel group.
    "reduced_train_loss": LOSS,
    # DeepSpeed's monitor (`Train/Samples/...`) is mapped by the TensorBoard reader alone, which
    # puts its samples axis on steps (tensorboard_tags.DEEPSPEED_SAMPLES_SERIES): its W&B and CSV
    # monitors write the same names at x = samples, which a table's step column would take as steps.
    # Levanter.
    "optim/learning_rate": LEARNING_RATE,
    "grad/norm/total": GRAD_NORM,
    "optim/skipped_step": SKIPPED_STEPS,
    # Keras' TensorBoard callback: `batch_<metric>` per batch, `epoch_<metric>` per epoch.
    "batch_loss": LOSS,
    "epoch_loss": LOSS,
    "epoch_learning_rate": LEARNING_RATE,
    "epoch_lr": LEARNING_RATE,
}

# Spellings that compete for one canonical name, best first (lower wins; ties: the first logged).
# A producer that logs several candidates for one series has one of them as the step-level
# signal the others summarize or decompose:
# - fairseq's `train_inner/<x>` (every log interval) over its `train/<x>` (epoch means),
# - MaxText's `learning/raw_grad_norm` (before clipping, what the Trainer, Megatron and
#   torch's clip_grad_norm_ report) over `learning/grad_norm` (after clipping: capped);
# - a total loss over its cross-entropy part (`ce_loss`, OLMo's `CrossEntropyLoss`), and a
#   per-step value over a per-epoch mean (`epoch_loss`, Keras' `epoch_<metric>`).
FIRST_CHOICE = 0
CANONICAL_SPELLING = 1
ORDINARY = 2
SECOND_CHOICE = 3
_FIRST_CHOICE_KEYS = frozenset({"learning/raw_grad_norm"})
_FIRST_CHOICE_PREFIXES = ("train_inner/",)
# Groups that custom loops and trackers log the optimizer's own numbers under (`optim/lr`).
_OPTIMIZER_GROUPS = frozenset({"optim", "optimizer", "opt"})
# Groups that custom loops log torch.amp.GradScaler's scale under (`AMP/loss_scale`,
# `scaler/scale`: a blind set's fp16 loop, session 30), and the names of the scale inside them.
_PRECISION_GROUPS = frozenset({"amp", "scaler", "grad_scaler", "gradscaler", "fp16"})
_SCALE_NAMES = frozenset({"loss_scale", "scale", "grad_scale"})
_SECOND_CHOICE_KEYS = frozenset(
    {
        "learning/grad_norm",
        "ce_loss",
        "crossentropyloss",
        "epoch_loss",
        "epoch_learning_rate",
        "epoch_lr",
    }
)


def _squeezed(key: str) -> str:
    return re.sub(r"[_/.]", "", key)


def _normalize_key(name: str) -> str:
    key = name.strip().lower()
    key = re.sub(r"[\s\-]+", "_", key)
    if key.startswith("train/"):
        key = key[len("train/") :]
    return key


# The second choices in any spelling canonical_metric maps through _SQUEEZED (`Epoch/Loss`,
# `cross_entropy_loss`): a per-epoch or partial loss loses to a per-step total in every spelling.
_SECOND_CHOICE_SQUEEZED = frozenset(_squeezed(key) for key in _SECOND_CHOICE_KEYS)

# The same names with separators squeezed out (`GradNorm`, `LearningRate`, `trainLoss`, the
# PyTorch TensorBoard tutorial's tags) and the tags that put the split last (`Loss/train`).
_SQUEEZED = {_squeezed(key): value for key, value in _CANONICAL.items() if "/" not in key}
_SQUEEZED.update({"gnorm": GRAD_NORM, "gradnorm": GRAD_NORM})
_SPLIT_SUFFIXES = {
    "train": "",
    "training": "",
    "val": "val_",
    "valid": "val_",
    "validation": "val_",
    "eval": "eval_",
}


# Per-optimizer LR monitors log `lr-{optimizer class}` or `lr/{optimizer class}` for one
# parameter group, and name the groups when there are several: Lightning's LearningRateMonitor
# `lr-{class}/pg1`, `/pg2`, ...; Composer's LRMonitor `lr-{class}/group0`, `/group1`, ...;
# torchtitan's `lr/{class}/0`, `/1`, .... The first group is the run's LR (`-momentum` series and
# a second optimizer's `lr-{class}-1` are other series). Matched on the original spelling, the
# class name capitalized as Python spells classes, so that `lr_decay`, `lr-scale` or `lr/max`
# stay other series.
_OPTIMIZER_LR = re.compile(r"^lr[-/][A-Z][A-Za-z0-9]*(?:/pg1|/group0|/0)?$")
# Keras logs a metric per batch (`batch_`, when update_freq is a number or "batch") and per epoch
# (`epoch_`, steps counted in epochs): the two are on different step axes. Its per-batch loss
# is always among them (a `batch_size` column is not a per-batch series).
_PER_BATCH_LOSS = "batch_loss"
_PER_EPOCH_PREFIX = "epoch_"


# Megatron-DeepSpeed (BigScience, AuroraGPT) groups its series as "<group>/<series>"
# ("lm-loss-training/lm loss", "grad-norm/grad-norm"; megatron/training.py training_log,
# evaluate_and_print_results), in TensorBoard and under the same keys in W&B exports.
MEGATRON_GROUPS = (
    "lm-loss-training/",
    "lm-loss-validation/",
    "learning-rate/",
    "grad-norm/",
    "loss-scale/",
)


# Group prefixes read through per name (`lm-loss-training/`, `optim/`, `train/`): real loggers
# nest two or three; a crafted name of 1,500 `opt/` groups recursed once per group and ended in
# RecursionError in every reader (red team round 8). Deeper names keep their own spelling.
MAX_GROUP_NESTING = 8


def canonical_metric(name: str) -> str:
    """The canonical name for a producer's metric name; unknown names keep a cleaned-up form."""
    return _canonical(name, 0)


def _canonical(name: str, depth: int) -> str:
    if depth > MAX_GROUP_NESTING:
        return name.strip()
    for group in MEGATRON_GROUPS:
        if name.startswith(group):
            series = name[len(group) :]
            canonical = _canonical(series, depth + 1)
            if canonical != series.strip():
                return canonical
    key = _normalize_key(name)
    if key in _CANONICAL:
        return _CANONICAL[key]
    if _OPTIMIZER_LR.match(name.strip()):
        return LEARNING_RATE
    if key.startswith(_FIRST_CHOICE_PREFIXES):
        inner = _canonical(key.split("/", 1)[1], depth + 1)
        if inner in (LOSS, GRAD_NORM, LEARNING_RATE, LOSS_SCALE):
            return inner
    group, _, inner = key.partition("/")
    if group in _OPTIMIZER_GROUPS and inner:
        # `optim/lr`, `optimizer/grad_norm`: what the optimizer reports, under its own group.
        named = _canonical(inner, depth + 1)
        if named in (GRAD_NORM, LEARNING_RATE, LOSS_SCALE):
            return named
    if group in _PRECISION_GROUPS and inner in _SCALE_NAMES:
        return LOSS_SCALE
    base, _, split = key.rpartition("/")
    if base and "/" not in base and split in _SPLIT_SUFFIXES:
        key = _SPLIT_SUFFIXES[split] + base  # "loss/train" -> "loss", "loss/val" -> "val_loss"
        if key in _CANONICAL:
            return _CANONICAL[key]
    squeezed = _squeezed(key)
    if squeezed in _SQUEEZED:
        return _SQUEEZED[squeezed]
    return name.strip()


def canonical_metrics(
    names: Sequence[str], mapper: Callable[[str], str] = canonical_metric
) -> list[str]:
    """`mapper` (`canonical_metric`, or a reader's own) of each of the names one file logs together.

    A file that logs per batch (`batch_loss`) keeps its per-epoch series (`epoch_loss`,
    `epoch_learning_rate`) under their own names: their steps count epochs, and an LR read off an
    epoch axis would put a jump at the wrong step of the batch-axis loss.
    """
    per_batch = any(_normalize_key(name) == _PER_BATCH_LOSS for name in names)
    canonical = []
    for name in names:
        if per_batch and _normalize_key(name).startswith(_PER_EPOCH_PREFIX):
            canonical.append(name.strip())
        else:
            canonical.append(mapper(name))
    return canonical


def metric_preference(name: str) -> int:
    """How strongly a spelling claims its canonical name (lower wins, see FIRST_CHOICE)."""
    key = _normalize_key(name)
    if key in _FIRST_CHOICE_KEYS or key.startswith(_FIRST_CHOICE_PREFIXES):
        return FIRST_CHOICE
    if key in _SECOND_CHOICE_KEYS or _squeezed(key) in _SECOND_CHOICE_SQUEEZED:
        return SECOND_CHOICE
    return CANONICAL_SPELLING if name.strip() == canonical_metric(name) else ORDINARY


# Every canonical series a spelling can map to (an unknown name keeps its own spelling).
_KNOWN_SERIES = frozenset(_CANONICAL.values()) | frozenset(_SQUEEZED.values()) | {LEARNING_RATE}


def names_a_known_series(name: str) -> bool:
    """Whether `name` maps to one of tscope's canonical series rather than keeping its own."""
    return canonical_metric(name) in _KNOWN_SERIES
