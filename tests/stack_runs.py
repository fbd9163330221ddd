"""Seeded runs of other training stacks, written under each stack's own metric names.

`STACKS` lists each stack's tags for the roles (loss, lr, grad_norm, eval_loss, loss_scale) and
the look-alike series it logs beside them; `write_run(stack, run_series(lr_jump), directory)`
writes the run the way that stack writes it: torch's SummaryWriter with the stack's exact tags
(torchtitan, Composer, MaxText, NeMo, Megatron-LM, torchtune, DeepSpeed's monitor on its samples
axis, fairseq's per-split directories), TF2 tensor summaries in Keras' `train/` and
`validation/`, or a W&B `history()` dump (JSONL with `_step`: OLMo, OLMo-core, Levanter,
nanotron). Where each name comes from is tabled in `tscope/ingest/logs/names.py`.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import pytest

from tests.synthetic import grad_norms, loss_curve, warmup_cosine
from tscope.model.metric_names import EVAL_LOSS, GRAD_NORM, LEARNING_RATE, LOSS, LOSS_SCALE

torch_tensorboard = pytest.importorskip("torch.utils.tensorboard")
from tensorboard_events import tensor_event, write_events  # noqa: E402

STEPS = 400
JUMP_AT, JUMP_FACTOR, JUMP_LENGTH = 240, 20.0, 5
EVAL_EVERY = 50
# Step axis tolerance: DeepSpeed writes the loss before its step counter moves and the LR after.
STEP_TOLERANCE = 1

Series = dict[str, np.ndarray]  # role -> values of steps 1..STEPS


def run_series(lr_jump: bool, seed: int = 0) -> Series:
    """The roles every stack logs: loss, lr, grad_norm, eval_loss (NaN between evals)."""
    lr = warmup_cosine(STEPS)
    loss = loss_curve(STEPS, seed)
    grads = grad_norms(STEPS, seed)
    if lr_jump:
        lr[JUMP_AT - 1 : JUMP_AT - 1 + JUMP_LENGTH] *= JUMP_FACTOR
        loss[JUMP_AT : JUMP_AT + 10] += 2.0 * np.exp(-np.arange(10) / 3.0)
        grads[JUMP_AT - 1 : JUMP_AT + 6] *= 6.0
    steps = np.arange(1, STEPS + 1)
    eval_loss = np.where(
        steps % EVAL_EVERY == 0, loss_curve(STEPS, seed + 7, noise=0.002) + 0.05, np.nan
    )
    return {"loss": loss, "lr": lr, "grad_norm": grads, "eval_loss": eval_loss}


# Other series each stack logs beside the roles, made from the roles: (tag, values).
Extra = Callable[[Series], np.ndarray]


def _times(role: str, factor: float) -> Extra:
    return lambda series: series[role] * factor


def _clipped(max_norm: float) -> Extra:
    return lambda series: np.minimum(series["grad_norm"], max_norm)


@dataclass(frozen=True)
class Stack:
    name: str
    writer: str  # tensorboard | wandb_history | deepspeed | fairseq | keras
    roles: dict[str, str]  # role -> the stack's tag for it
    # tags that are not the run's loss / LR / grad norm / eval loss, and keep their own names
    others: dict[str, Extra] = field(default_factory=dict)


ROLE_METRICS = {
    "loss": LOSS,
    "lr": LEARNING_RATE,
    "grad_norm": GRAD_NORM,
    "eval_loss": EVAL_LOSS,
    "loss_scale": LOSS_SCALE,
}

STACKS = [
    Stack(
        "torchtitan",
        "tensorboard",
        {
            "loss": "loss_metrics/global_avg_loss",
            "lr": "lr/AdamW",
            "grad_norm": "grad_norm",
            "eval_loss": "validation_metrics/loss",
        },
        {"loss_metrics/global_max_loss": _times("loss", 1.3)},
    ),
    Stack(
        "composer",
        "tensorboard",
        {
            "loss": "loss/train/total",
            "lr": "lr-DecoupledAdamW/group0",
            "grad_norm": "l2_norm/grad/global",
            "eval_loss": "metrics/eval/LanguageCrossEntropy",
        },
        {
            "lr-DecoupledAdamW/group1": _times("lr", 0.1),
            "l2_norm/grad/model.transformer.wte.weight": _times("grad_norm", 0.3),
            "metrics/train/LanguageCrossEntropy": _times("loss", 0.99),
        },
    ),
    Stack(
        "maxtext",
        "tensorboard",
        {
            "loss": "learning/loss",
            "lr": "learning/current_learning_rate",
            "grad_norm": "learning/raw_grad_norm",
            "eval_loss": "eval/avg_loss",
        },
        # After clipping at max_norm=1.0 (MaxText's gradient_clipping_threshold default)
        {"learning/grad_norm": _clipped(1.0), "learning/lm_loss": _times("loss", 0.98)},
    ),
    Stack(
        "nemo",
        "tensorboard",
        {
            "loss": "reduced_train_loss",
            "lr": "lr",
            "grad_norm": "grad_norm",
            "eval_loss": "val_loss",
        },
        {"consumed_samples": lambda series: np.arange(1, STEPS + 1) * 256.0},
    ),
    Stack(
        "megatron-lm",
        "tensorboard",
        {
            "loss": "lm loss",
            "lr": "learning-rate",
            "grad_norm": "grad-norm",
            "eval_loss": "lm loss validation",
            "loss_scale": "loss-scale",
        },
        {"params-norm": lambda series: np.linspace(300.0, 320.0, STEPS)},
    ),
    Stack(
        "megatron-deepspeed",
        "tensorboard",
        {
            "loss": "lm-loss-training/lm loss",
            "lr": "learning-rate/learning-rate",
            "grad_norm": "grad-norm/grad-norm",
            "eval_loss": "lm-loss-validation/lm loss validation",
            "loss_scale": "loss-scale/loss-scale",
        },
        {"batch-size/batch-size": lambda series: np.full(STEPS, 512.0)},
    ),
    Stack(
        # The same keys in a W&B history dump (AuroraGPT's Megatron-DeepSpeed runs log them so).
        "megatron-deepspeed-wandb",
        "wandb_history",
        {
            "loss": "lm-loss-training/lm loss",
            "lr": "learning-rate/learning-rate",
            "grad_norm": "grad-norm/grad-norm",
            "eval_loss": "lm-loss-validation/lm loss validation",
        },
        {"lm-loss-training/lm loss vs samples": _times("loss", 1.0)},
    ),
    Stack(
        "torchtune",
        "tensorboard",
        {"loss": "loss", "lr": "lr", "grad_norm": "grad_norm"},
        {"tokens_per_second_per_gpu": lambda series: np.full(STEPS, 5000.0)},
    ),
    Stack(
        "deepspeed",
        "deepspeed",
        {
            "loss": "Train/Samples/train_loss",
            "lr": "Train/Samples/lr",
            "loss_scale": "Train/Samples/loss_scale",
        },
    ),
    Stack(
        "fairseq",
        "fairseq",
        {"loss": "loss", "lr": "lr", "grad_norm": "gnorm", "eval_loss": "loss"},
        {"ppl": lambda series: 2.0 ** series["loss"]},
    ),
    Stack(
        "keras",
        "keras",
        {"loss": "epoch_loss", "lr": "epoch_learning_rate", "eval_loss": "epoch_loss"},
        {"epoch_accuracy": lambda series: 1.0 / series["loss"]},
    ),
    Stack(
        "olmo",
        "wandb_history",
        {
            "loss": "train/CrossEntropyLoss",
            "lr": "optim/learning_rate_group0",
            "grad_norm": "optim/total_grad_norm",
        },
        {
            "optim/learning_rate_group1": _times("lr", 1.0),
            "train/Perplexity": lambda series: np.exp(series["loss"]),
            "eval/v3-small-c4_en-validation/CrossEntropyLoss": lambda series: series["eval_loss"],
        },
    ),
    Stack(
        "olmo-core",
        "wandb_history",
        {
            "loss": "train/CE loss",
            "lr": "optim/LR (group 0)",
            "grad_norm": "optim/total grad norm",
        },
        {
            "optim/LR (group 1)": _times("lr", 1.0),
            "train/Z loss": _times("loss", 1e-4),
            "optim/step skipped": lambda series: np.zeros(STEPS),
        },
    ),
    Stack(
        "levanter",
        "wandb_history",
        {
            "loss": "train/loss",
            "lr": "optim/learning_rate",
            "grad_norm": "grad/norm/total",
            "eval_loss": "eval/loss",
        },
        {"grad/norm/transformer.blocks.0.mlp.w1": _times("grad_norm", 0.2)},
    ),
    Stack(
        "nanotron",
        "wandb_history",
        {"loss": "lm_loss", "lr": "lr", "grad_norm": "grad_norm"},
        {"tokens_per_sec": lambda series: np.full(STEPS, 1.2e5)},
    ),
]


def points(values: np.ndarray) -> list[tuple[int, float]]:
    return [(step, float(v)) for step, v in enumerate(values, start=1) if np.isfinite(v)]


def _tag_values(stack: Stack, series: Series, roles: tuple[str, ...]) -> dict[str, np.ndarray]:
    values = {tag: _role_values(series, role) for role, tag in stack.roles.items() if role in roles}
    values.update({tag: extra(series) for tag, extra in stack.others.items()})
    return values


def _role_values(series: Series, role: str) -> np.ndarray:
    if role == "loss_scale":  # fp16 dynamic scaling, steady at 2**16
        return np.full(STEPS, 65536.0)
    return series[role]


def write_summary_writer(directory: Path, values: dict[str, np.ndarray]) -> None:
    writer = torch_tensorboard.SummaryWriter(log_dir=str(directory))
    for step in range(1, STEPS + 1):
        for tag, series in values.items():
            if np.isfinite(series[step - 1]):
                writer.add_scalar(tag, float(series[step - 1]), step)
    writer.close()


def write_run(stack: Stack, series: Series, directory: Path) -> Path:
    run_dir = directory / stack.name
    if stack.writer == "tensorboard":
        write_summary_writer(run_dir, _tag_values(stack, series, tuple(ROLE_METRICS)))
    elif stack.writer == "wandb_history":
        rows: dict[int, dict[str, float]] = {}
        for tag, values in _tag_values(stack, series, tuple(ROLE_METRICS)).items():
            for step, value in points(values):
                rows.setdefault(step, {"_step": step})[tag] = value
        run_dir.mkdir(parents=True)
        lines = [json.dumps(rows[step]) for step in sorted(rows)]
        (run_dir / "history.jsonl").write_text("\n".join(lines) + "\n")
    elif stack.writer == "deepspeed":
        _write_deepspeed(run_dir, stack, series)
    elif stack.writer == "fairseq":
        _write_fairseq(run_dir, stack, series)
    elif stack.writer == "keras":
        _write_keras(run_dir, stack, series)
    else:
        raise ValueError(stack.writer)
    return run_dir


def _write_deepspeed(run_dir: Path, stack: Stack, series: Series) -> None:
    """engine.py: the loss in backward() at global_samples before the step adds the batch, the LR
    and loss scale in step() after it; every step, train_batch_size=256."""
    batch = 256
    writer = torch_tensorboard.SummaryWriter(log_dir=str(run_dir / "ds_monitor"))
    for step in range(1, STEPS + 1):
        writer.add_scalar(stack.roles["loss"], float(series["loss"][step - 1]), (step - 1) * batch)
        writer.add_scalar(stack.roles["lr"], float(series["lr"][step - 1]), step * batch)
        writer.add_scalar(stack.roles["loss_scale"], 65536.0, step * batch)
    writer.close()


def _write_fairseq(run_dir: Path, stack: Stack, series: Series) -> None:
    """progress_bar.py: one SummaryWriter per split under --tensorboard-logdir; `train_inner` every
    log interval (1 here), `train` (epoch means) and `valid` at each epoch's end."""
    epoch_end = np.arange(1, STEPS + 1) % EVAL_EVERY == 0
    inner = _tag_values(stack, series, ("loss", "lr", "grad_norm"))
    write_summary_writer(run_dir / "train_inner", inner)
    epoch_means = {
        tag: np.where(
            epoch_end, np.convolve(values, np.ones(EVAL_EVERY) / EVAL_EVERY)[:STEPS], np.nan
        )
        for tag, values in inner.items()
    }
    write_summary_writer(run_dir / "train", epoch_means)
    valid = {"loss": series["eval_loss"], "ppl": 2.0 ** series["eval_loss"]}
    write_summary_writer(run_dir / "valid", valid)
    write_summary_writer(run_dir / "valid1", {"loss": series["eval_loss"] + 0.3})  # a 2nd subset


def _write_keras(run_dir: Path, stack: Stack, series: Series) -> None:
    """callbacks/tensorboard.py with update_freq="epoch" (the default): TF2 tensor summaries,
    `epoch_<metric>` at step=epoch in `train/`, the `val_` metrics in `validation/`. One epoch per
    step of the seeded run (a small-data fit)."""
    train = _tag_values(stack, series, ("loss", "lr"))
    validation = {"epoch_loss": series["eval_loss"]}
    for split, values in (("train", train), ("validation", validation)):
        events = []
        for tag, tag_values in values.items():
            # tf.summary puts the plugin metadata on a tag's first value only
            events += [
                tensor_event(epoch, tag, value, with_metadata=index == 0)
                for index, (epoch, value) in enumerate(points(tag_values))
            ]
        (run_dir / split).mkdir(parents=True)
        write_events(run_dir / split, sorted(events, key=lambda event: event.step))
