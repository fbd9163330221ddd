"""Producer: a plain-torch training loop in the shape of karpathy/nanoGPT's train.py.

Iterations count from 0 (`iter_num`); iteration i is optimizer step i+1 of the spec, so every
planted step s of the spec shows at the logged iteration s-1 (`logged_step`). At the top of an
iteration that is a multiple of `save_every` the loop overwrites `ckpt.pt` with
{model, optimizer, model_args, iter_num, best_val_loss, config}, as nanoGPT does with
always_save_checkpoint. The log is the loop's own, in one of three formats by run index:
`metrics.jsonl`, `metrics.csv` (iter, train_loss, lr, grad_norm) or `train.log` (nanoGPT's stdout
line `iter N: loss X, time Tms, mfu P%` with the `lr` field forks add). The logged loss is the mean
over the micro-batches of the iteration (stock nanoGPT prints the last micro-batch's: a bad
micro-batch would then be invisible in the log). bench/ood's knobs: `logging_steps` is nanoGPT's
`log_interval` (only iterations that are multiples of it are logged), `block_size` the context
and `vocab_size` a padded vocabulary (the data keeps its 96 characters); the fifth block's
`corpus` (the stdlib's source code instead of its docstrings), `optimizer` "adam"
(`torch.optim.Adam(model.parameters())`, torch's betas, no weight decay), `max_grad_norm` (the
clipping norm, None = 1.0) and `tie_word_embeddings` (False: the head gets its own copy of the
token table at initialization).

A resume (phase "resume") loads `ckpt.pt` the way `init_from='resume'` does, except for what the
cause loses: the optimizer state (fresh AdamW), the schedule (the LR counter restarts at the
resume: warm-up again), or the weights (the model stays at its initialization).
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import Any

from spec import (
    RESUME_CAUSES,
    RESUME_OPTIMIZER_LOST,
    RESUME_SCHEDULER_LOST,
    RESUME_WEIGHTS_REINIT,
    RunSpec,
    knob,
)

LOG_FORMATS = ("jsonl", "csv", "stdout")
WEIGHT_DECAY = 0.1
BETAS = (0.9, 0.95)
GRAD_CLIP = 1.0
CRASH_EXIT_CODE = 75
SGD_MOMENTUM = 0.9
EVAL_BATCHES = 4  # fixed validation batches (bench/ood's eval_every; the benchmark evaluates none)


def phases(spec: RunSpec) -> list[str]:
    return ["first", "resume"] if spec.cause in RESUME_CAUSES else ["train"]


def between_phases(spec: RunSpec, run_dir: Path) -> list[str]:
    return {
        RESUME_OPTIMIZER_LOST: [
            "resumed without loading the optimizer state (fresh "
            + ("Adam)" if knob(spec, "optimizer") == "adam" else "AdamW)")
        ],
        RESUME_SCHEDULER_LOST: ["resumed with the LR schedule's counter restarted at the resume"],
        RESUME_WEIGHTS_REINIT: ["resumed without loading the weights (initial weights kept)"],
    }[spec.cause]


# bench/ood: a plain CSV a user's own loop writes, with its own column names.
CUSTOM_CSV_HEADER = "iter,train/lm_loss,lr,gnorm\n"


def log_format(spec: RunSpec) -> str:
    chosen = str(knob(spec, "log_format"))  # bench/ood sets it ("custom_csv" too)
    return chosen or LOG_FORMATS[spec.index % len(LOG_FORMATS)]


class _Log:
    def __init__(self, run_dir: Path, spec: RunSpec) -> None:
        self.format = log_format(spec)
        name = {
            "jsonl": "metrics.jsonl",
            "csv": "metrics.csv",
            "custom_csv": "train_log.csv",
            "stdout": "train.log",
        }[self.format]
        self.path = run_dir / name
        fresh = not self.path.exists()
        self.file = self.path.open("a", encoding="utf-8")
        if fresh and self.format == "csv":
            self.file.write("iter,train_loss,lr,grad_norm\n")
        if fresh and self.format == "custom_csv":
            self.file.write(CUSTOM_CSV_HEADER)

    def write(
        self, iteration: int, loss: float, lr: float, grad_norm: float, seconds: float
    ) -> None:
        if self.format == "jsonl":
            record = {"iter": iteration, "loss": loss, "lr": lr, "grad_norm": grad_norm}
            self.file.write(json.dumps(record) + "\n")
        elif self.format in ("csv", "custom_csv"):
            self.file.write(f"{iteration},{loss:.6f},{lr:.6e},{grad_norm:.6f}\n")
        else:
            self.file.write(
                f"iter {iteration}: loss {loss:.4f}, time {seconds * 1000:.2f}ms, mfu -100.00%, lr {lr:.4e}\n"
            )
        self.file.flush()

    def write_eval(self, iteration: int, train_loss: float, val_loss: float) -> None:
        """nanoGPT's evaluation record: its stdout line, or a `val_loss` row (its wandb.log keys
        are `train/loss` and `val/loss`); the CSV's fixed columns hold none."""
        if self.format == "jsonl":
            self.file.write(json.dumps({"iter": iteration, "val_loss": val_loss}) + "\n")
        elif self.format == "stdout":
            self.file.write(
                f"step {iteration}: train loss {train_loss:.4f}, val loss {val_loss:.4f}\n"
            )
        self.file.flush()


def _optimizer(model: object, spec: RunSpec) -> object:
    """nanoGPT's AdamW, or (bench/ood's `optimizer` knob) SGD with momentum on the same groups,
    or plain Adam over all parameters as a user's own loop builds it (no weight decay)."""
    import torch

    from tscope.demo.tiny_gpt import optimizer_groups

    if knob(spec, "optimizer") == "adam":
        return torch.optim.Adam(model.parameters(), lr=spec.peak_lr)  # type: ignore[attr-defined]
    groups = optimizer_groups(model, WEIGHT_DECAY)  # type: ignore[arg-type]
    if knob(spec, "optimizer") == "sgd":
        return torch.optim.SGD(groups, lr=spec.peak_lr, momentum=SGD_MOMENTUM)
    return torch.optim.AdamW(groups, lr=spec.peak_lr, betas=BETAS)


def train_phase(spec: RunSpec, run_dir: Path, phase: str, record_path: Path) -> None:
    import text_corpus
    import torch
    from planting import PlantedBatches, freeze, frozen_prefix
    from schedules import multiplier

    from tscope.demo.tiny_gpt import TinyGPT, TinyGPTConfig

    torch.set_num_threads(1)
    torch.manual_seed(spec.seed)
    tokenizer = text_corpus.CharacterTokenizer()
    text = text_corpus.build_text(str(knob(spec, "corpus")))  # bench/ood's fifth block may set it
    data = torch.tensor(tokenizer.encode(text), dtype=torch.long)
    # bench/ood's third block may set the context length and pad the model's vocabulary.
    block = int(knob(spec, "block_size")) or text_corpus.BLOCK_TOKENS
    config = TinyGPTConfig(
        vocab_size=int(knob(spec, "vocab_size")) or tokenizer.vocab_size,
        block_size=block,
        n_layer=spec.layers,
        n_head=spec.heads,
        n_embd=spec.hidden,
        bias=True,
    )
    model_args = {**config.to_model_args(), "dropout": 0.0}  # the keys nanoGPT's ckpt.pt holds
    model = TinyGPT(config)
    if knob(spec, "tie_word_embeddings") is False:  # bench/ood's fifth block: an untied head
        model.lm_head.weight = torch.nn.Parameter(model.transformer.wte.weight.detach().clone())
    clip = knob(spec, "max_grad_norm")  # None: nanoGPT's grad_clip 1.0; 0: no clipping
    clip = GRAD_CLIP if clip is None else float(clip) or float("inf")
    optimizer: Any = _optimizer(model, spec)
    start, schedule_origin = 0, 0
    if phase == "resume":
        checkpoint = torch.load(run_dir / "ckpt.pt", map_location="cpu", weights_only=True)
        start = int(checkpoint["iter_num"])
        if spec.cause != RESUME_WEIGHTS_REINIT:
            model.load_state_dict(checkpoint["model"])
        if spec.cause != RESUME_OPTIMIZER_LOST:
            optimizer.load_state_dict(checkpoint["optimizer"])
        if spec.cause == RESUME_SCHEDULER_LOST:
            schedule_origin = start
    generator = torch.Generator().manual_seed(spec.seed + start)
    batches = PlantedBatches(spec, tokenizer.vocab_size)
    batches.calls = start * spec.grad_accum
    cursor = start * spec.grad_accum * spec.batch_size * block
    prefix = frozen_prefix(spec)
    log = _Log(run_dir, spec)
    half = {"bf16": torch.bfloat16, "fp16": torch.float16}.get(spec.precision)
    autocast = torch.autocast("cpu", dtype=half or torch.bfloat16, enabled=half is not None)
    # fp16 (bench/ood) scales the loss as torch.amp documents; a scaler that is not enabled passes
    # everything through, so the other precisions train exactly as before.
    scaler = torch.amp.GradScaler("cpu", enabled=spec.precision == "fp16")
    eval_every = int(knob(spec, "eval_every"))
    eval_offsets = torch.arange(EVAL_BATCHES * spec.batch_size) * block  # the corpus' first blocks
    log_interval = int(knob(spec, "logging_steps"))
    config = {k: v for k, v in dataclasses.asdict(spec).items() if k != "plant"}
    crash_after = int(spec.plant["crash_after"]) - 1 if phase == "first" else None
    for iteration in range(start, spec.steps):
        if iteration % spec.save_every == 0 and iteration > start:
            torch.save(
                {
                    "model": model.state_dict(),
                    "optimizer": optimizer.state_dict(),
                    "model_args": model_args,
                    "iter_num": iteration,
                    "best_val_loss": 1e9,
                    "config": config,
                },
                run_dir / "ckpt.pt",
            )
        if prefix is not None and iteration + 1 >= int(spec.plant["step"]):
            freeze(model, prefix)
            prefix = None
        lr = spec.peak_lr * multiplier(spec, iteration - schedule_origin + 1)
        for group in optimizer.param_groups:
            group["lr"] = lr
        started = time.monotonic()
        losses = []
        for _ in range(spec.grad_accum):
            if spec.data_order == "sequential":
                offsets = (cursor + block * torch.arange(spec.batch_size)) % (len(data) - block - 1)
                cursor += block * spec.batch_size
            else:
                offsets = torch.randint(
                    len(data) - block - 1, (spec.batch_size,), generator=generator
                )
            chunk = torch.stack([data[i : i + block + 1] for i in offsets.tolist()])  # (B, T+1)
            chunk = batches(chunk)
            with autocast:
                _, loss = model(chunk[:, :-1], chunk[:, 1:])
            scaler.scale(loss / spec.grad_accum).backward()
            losses.append(float(loss.detach()))
        scaler.unscale_(optimizer)
        grad_norm = float(torch.nn.utils.clip_grad_norm_(model.parameters(), clip))
        scaler.step(optimizer)
        scaler.update()
        optimizer.zero_grad(set_to_none=True)
        if iteration % log_interval == 0:  # nanoGPT's `log_interval` (bench/ood; else 1)
            loss_mean = sum(losses) / len(losses)
            log.write(iteration, loss_mean, lr, grad_norm, time.monotonic() - started)
        if eval_every and (iteration + 1) % eval_every == 0:
            log.write_eval(
                iteration, sum(losses) / len(losses), _evaluate(model, data, eval_offsets, block)
            )
        if crash_after is not None and iteration == crash_after:
            record_path.write_text(json.dumps({"global_step": iteration + 1}), encoding="utf-8")
            log.file.close()
            os._exit(CRASH_EXIT_CODE)
    record_path.write_text(json.dumps({"global_step": spec.steps}), encoding="utf-8")


def _evaluate(model: Any, data: Any, offsets: Any, block: int) -> float:
    """The mean loss over the fixed validation blocks, as nanoGPT's estimate_loss (eval mode, no
    gradient), back in training mode after."""
    import torch

    model.eval()
    with torch.no_grad():
        chunk = torch.stack([data[i : i + block + 1] for i in offsets.tolist()])  # (B, T+1)
        _, loss = model(chunk[:, :-1], chunk[:, 1:])
    model.train()
    return float(loss)
