"""Train the demo model with a planted learning-rate jump and leave a nanoGPT-style run dir.

    from pathlib import Path
    from tscope.demo.train import make_demo_run
    demo = make_demo_run(Path("demo-run"), steps=300, seed=0)

The run directory holds what a nanoGPT run leaves behind, in formats tscope reads:

- `train.log`: nanoGPT's stdout. The config echo (`Overriding config with ...:` and
  `key = value` lines) at the top, then
  `step N: train loss X, val loss Y` at each evaluation and `iter N: loss X, time Tms, mfu P%`
  for every optimizer step.
- `metrics.jsonl`: one object per optimizer step
  `{"step", "train/loss", "train/grad_norm", "train/learning_rate"}` and
  `{"step", "eval/loss"}` per evaluation.
- `ckpt_000100.pt`: nanoGPT's checkpoint dict (`model`, `optimizer`, `model_args`, `iter_num`,
  `best_val_loss`, `config`), plain tensors and builtins only: `torch.load(weights_only=True)`.
- `.tscope-demo.json`: the files this demo wrote, so a rerun may replace them (see below).

Steps follow nanoGPT's `iter_num`, counted from 0. "step N" names optimizer update N: its
logged loss is the loss of the batch that update used (computed before the update), its
learning rate is the one that update applied, and its grad norm is the pre-clip norm of that
update's gradient. `ckpt_00000N.pt` (iter_num N) is saved at the top of iteration N, as nanoGPT
does: it holds the state after updates 0..N-1, just before update N.

The planted cause: updates planted_step .. planted_step + window_steps - 1 use the scheduled
learning rate times `lr_factor`. The first loss to show it is therefore step planted_step + 1.

Out dir policy: the run is written into `out_dir` itself. It must be new, empty, or hold an
earlier demo run and nothing else (then that run's files are replaced); anything else is refused,
so the demo never deletes or mixes with files it did not write (run_folder.py).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO

import torch

from tscope.demo.corpus import BatchStream, Corpus, load_corpus
from tscope.demo.run_folder import (
    LOG_NAME,
    MARKER_NAME,
    METRICS_NAME,
    checkpoint_name,
    prepare_run_dir,
)
from tscope.demo.tiny_gpt import TinyGPT, TinyGPTConfig, optimizer_groups
from tscope.errors import UsageError
from tscope.output_files import write_text

DEFAULT_STEPS = 300
MIN_STEPS = 100  # below this, warmup, a pre-spike baseline and the recovery do not all fit
# Measured on seeds 0-2, 300 steps: the loss peaks 1.0-1.2 nats (12-16 robust σ) over its
# pre-window median and the 10-step rolling median is back within 2σ 28-50 steps later. A
# 3-step window hit about as hard but took 44-92 steps to recover.
LR_JUMP_FACTOR = 20.0  # 3e-3 → 6e-2, far past what this model tolerates
LR_JUMP_WINDOW_STEPS = 2
PLANTED_AT_FRACTION = 0.5  # half the run as baseline, half to recover
CHECKPOINT_MARGIN_STEPS = 3  # extra checkpoints this many steps before / after the window
A100_BF16_PEAK_FLOPS = 312e12  # nanoGPT reports MFU against this, whatever the hardware
MFU_WARMUP_ITERS = 5  # nanoGPT prints mfu -100.00% until the 5th iteration of the process
CONFIG_FILE_NAME = "config/train_tscope_demo.py"  # named in train.log's config echo only


@dataclass(frozen=True)
class TrainConfig:
    """nanoGPT's training knobs (same names); written to train.log and into every checkpoint."""

    out_dir: str  # folder name of the run (relative, as nanoGPT configs give it)
    max_iters: int  # optimizer updates; the last evaluation and checkpoint are at iter max_iters
    seed: int = 0  # model init and every batch are derived from it
    eval_interval: int = 50  # evaluate and checkpoint every this many iterations
    log_interval: int = 1  # a train.log line for every optimizer step
    eval_iters: int = 8  # batches averaged per split per evaluation (the same batches each time)
    always_save_checkpoint: bool = True
    init_from: str = "scratch"
    dataset: str = "stdlib_docstrings_char"
    gradient_accumulation_steps: int = 1
    batch_size: int = 16  # sequences per optimizer step
    block_size: int = 64  # characters per sequence: 1,024 tokens per step
    n_layer: int = 2
    n_head: int = 4
    n_embd: int = 64
    dropout: float = 0.0  # off: every step is reproducible from (seed, step)
    bias: bool = False
    learning_rate: float = 3e-3  # high but stable for a 0.1M-parameter char model
    weight_decay: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.99  # shakespeare_char: a bit above 0.95 because steps see few tokens
    grad_clip: float = 1.0  # clip the global L2 norm; the logged grad_norm is before clipping
    # Warmup, then constant: a flat LR makes the planted jump the only schedule event, and a
    # cosine decay (tried) shrinks the jumped LR and with it the spike (z 5-20 vs 10-33).
    decay_lr: bool = False
    # Linear warmup. 20 steps left grad-norm transients of 4-100x right after it (measured).
    warmup_iters: int = 40
    lr_decay_iters: int = 300  # used only with decay_lr: cosine to min_lr, reached here
    min_lr: float = 3e-4  # learning_rate / 10 (Chinchilla)
    device: str = "cpu"
    dtype: str = "float32"
    compile: bool = False

    def model_config(self, vocab_size: int) -> TinyGPTConfig:
        return TinyGPTConfig(
            vocab_size=vocab_size,
            block_size=self.block_size,
            n_layer=self.n_layer,
            n_head=self.n_head,
            n_embd=self.n_embd,
            bias=self.bias,
        )


@dataclass(frozen=True)
class DemoRun:
    """Where the demo run is and what was planted in it (the answer an analysis should find)."""

    run_dir: Path
    planted_step: int  # first optimizer step (iter_num) with the multiplied learning rate
    lr_factor: float  # multiplier on the scheduled learning rate during the window
    window_steps: int  # consecutive steps with the multiplied rate
    steps: int  # optimizer updates in the whole run

    @property
    def window(self) -> range:
        """The steps whose updates used the multiplied learning rate."""
        return range(self.planted_step, self.planted_step + self.window_steps)


def scheduled_lr(config: TrainConfig, iter_num: int) -> float:
    """nanoGPT's get_lr: linear warmup, then cosine decay to min_lr (or constant without decay_lr).

    Unlike nanoGPT, decay_lr=False keeps the warmup: only the decay is switched off.
    """
    if iter_num < config.warmup_iters:
        return config.learning_rate * (iter_num + 1) / (config.warmup_iters + 1)
    if not config.decay_lr:
        return config.learning_rate
    if iter_num > config.lr_decay_iters:
        return config.min_lr
    decay_ratio = (iter_num - config.warmup_iters) / (config.lr_decay_iters - config.warmup_iters)
    coefficient = 0.5 * (1.0 + math.cos(math.pi * decay_ratio))  # 1 → 0
    return config.min_lr + coefficient * (config.learning_rate - config.min_lr)


def make_demo_run(
    out_dir: Path,
    *,
    steps: int = DEFAULT_STEPS,
    seed: int = 0,
    progress: Callable[[int, int], None] | None = None,
) -> DemoRun:
    """Train the demo model for `steps` updates into `out_dir`; progress(done, total) per step."""
    if steps < MIN_STEPS:
        raise UsageError(f"The demo needs at least {MIN_STEPS} steps (got {steps}).")
    out_dir = Path(out_dir)
    demo = DemoRun(
        run_dir=out_dir,
        planted_step=round(steps * PLANTED_AT_FRACTION),
        lr_factor=LR_JUMP_FACTOR,
        window_steps=LR_JUMP_WINDOW_STEPS,
        steps=steps,
    )
    config = TrainConfig(
        out_dir=out_dir.resolve().name or "out",
        max_iters=steps,
        seed=seed,
        eval_interval=max(10, steps // 6 // 10 * 10),  # ~6 evaluations at round steps
        lr_decay_iters=steps,
    )
    checkpoint_iters = _checkpoint_iters(config, demo)
    written = [LOG_NAME, METRICS_NAME, *(checkpoint_name(i) for i in checkpoint_iters)]
    prepare_run_dir(out_dir)
    # The marker goes first: an interrupted demo can still be replaced by the next one.
    marker = {
        "tool": "tscope demo",
        "seed": seed,
        "steps": steps,
        "planted": {
            "cause": "learning-rate jump",
            "step": demo.planted_step,
            "lr_factor": demo.lr_factor,
            "window_steps": demo.window_steps,
        },
        "files": written,
    }
    write_text(out_dir / MARKER_NAME, json.dumps(marker, indent=2, sort_keys=True) + "\n")
    corpus = load_corpus()
    # One thread: on 64-wide matrices a second thread buys little, and on a busy 2-core machine
    # it made steps 5-10x slower (measured 65 ms vs 320-650 ms a step under load).
    threads_before = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with (
            torch.random.fork_rng(devices=[]),  # seeding must not leak into the caller's RNG
            (out_dir / LOG_NAME).open("w", encoding="utf-8", buffering=1) as log,
            (out_dir / METRICS_NAME).open("w", encoding="utf-8", buffering=1) as metrics,
        ):
            _train(config, demo, corpus, checkpoint_iters, log, metrics, progress)
    finally:
        torch.set_num_threads(threads_before)
    return demo


def _checkpoint_iters(config: TrainConfig, demo: DemoRun) -> list[int]:
    """Every evaluation after the first, plus one checkpoint on each side of the planted window."""
    at_evals = set(range(config.eval_interval, config.max_iters + 1, config.eval_interval))
    around_window = {
        demo.planted_step - CHECKPOINT_MARGIN_STEPS,
        demo.planted_step + demo.window_steps + CHECKPOINT_MARGIN_STEPS,
    }
    return sorted(at_evals | around_window | {config.max_iters})


def _train(
    config: TrainConfig,
    demo: DemoRun,
    corpus: Corpus,
    checkpoint_iters: list[int],
    log: IO[str],
    metrics: IO[str],
    progress: Callable[[int, int], None] | None,
) -> None:
    torch.manual_seed(config.seed)
    model = TinyGPT(config.model_config(corpus.vocabulary.size))
    groups = optimizer_groups(model, config.weight_decay)
    optimizer = torch.optim.AdamW(
        groups, lr=config.learning_rate, betas=(config.beta1, config.beta2), eps=1e-8
    )
    tokens_per_iter = config.gradient_accumulation_steps * config.batch_size * config.block_size
    flops_per_iter = model.flops_per_iteration(tokens_per_iter)
    _write_header(log, config, corpus, model, groups, tokens_per_iter)

    best_val_loss = float("inf")
    running_mfu = -1.0
    for iter_num in range(config.max_iters + 1):
        started = time.perf_counter()
        if iter_num % config.eval_interval == 0 or iter_num == config.max_iters:
            train_loss, val_loss = _estimate_losses(model, corpus, config)
            log.write(f"step {iter_num}: train loss {train_loss:.4f}, val loss {val_loss:.4f}\n")
            metrics.write(json.dumps({"step": iter_num, "eval/loss": val_loss}) + "\n")
            best_val_loss = min(best_val_loss, val_loss)
        if iter_num in checkpoint_iters:
            log.write(f"saving checkpoint to {config.out_dir}\n")
            checkpoint = {
                "model": model.state_dict(),
                "optimizer": optimizer.state_dict(),
                "model_args": model.config.to_model_args(),
                "iter_num": iter_num,
                "best_val_loss": best_val_loss,
                "config": asdict(config),
            }
            torch.save(checkpoint, demo.run_dir / checkpoint_name(iter_num))
        if iter_num == config.max_iters:
            break

        lr = scheduled_lr(config, iter_num)
        if iter_num in demo.window:
            lr *= demo.lr_factor  # the planted cause
        for group in optimizer.param_groups:
            group["lr"] = lr
        inputs, targets = corpus.batch(
            "train",
            index=iter_num,
            seed=config.seed,
            batch_size=config.batch_size,
            block_size=config.block_size,
        )  # (B, T), (B, T)
        _, loss = model(inputs, targets)
        assert loss is not None  # targets were given
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), config.grad_clip)
        optimizer.step()

        elapsed = time.perf_counter() - started
        if iter_num >= MFU_WARMUP_ITERS:
            mfu = flops_per_iter / elapsed / A100_BF16_PEAK_FLOPS
            running_mfu = mfu if running_mfu == -1.0 else 0.9 * running_mfu + 0.1 * mfu
        loss_value = loss.item()
        log.write(
            f"iter {iter_num}: loss {loss_value:.4f}, time {elapsed * 1000:.2f}ms, "
            f"mfu {running_mfu * 100:.2f}%\n"
        )
        record = {
            "step": iter_num,
            "train/loss": loss_value,
            "train/grad_norm": grad_norm.item(),
            "train/learning_rate": lr,
        }
        metrics.write(json.dumps(record) + "\n")
        if progress is not None:
            progress(iter_num + 1, config.max_iters)


def _write_header(
    log: IO[str],
    config: TrainConfig,
    corpus: Corpus,
    model: TinyGPT,
    groups: list[dict[str, object]],
    tokens_per_iter: int,
) -> None:
    """What nanoGPT prints before training: its config file, then sizes and optimizer groups.

    nanoGPT's configurator echoes the config file it was given; the demo echoes the file its
    settings would form (it writes no such file).
    """
    log.write(f"Overriding config with {CONFIG_FILE_NAME}:\n")
    log.write("# tscope demo: a character-level GPT on Python standard-library docstrings\n")
    for key, value in asdict(config).items():
        log.write(f"{key} = {value!r}\n")
    log.write(f"tokens per iteration will be: {tokens_per_iter:,}\n")
    log.write(f"found vocab_size = {corpus.vocabulary.size} (inside {config.dataset})\n")
    log.write("Initializing a new model from scratch\n")
    # nanoGPT reports the count without position embeddings.
    non_embedding = model.parameter_count() - model.transformer.wpe.weight.numel()
    log.write(f"number of parameters: {non_embedding / 1e6:.2f}M\n")
    for label, group in zip(("decayed", "non-decayed"), groups, strict=True):
        params = group["params"]
        assert isinstance(params, list)
        count = sum(p.numel() for p in params)
        log.write(f"num {label} parameter tensors: {len(params)}, with {count:,} parameters\n")
    log.write("using fused AdamW: False\n")


@torch.no_grad()
def _estimate_losses(model: TinyGPT, corpus: Corpus, config: TrainConfig) -> tuple[float, float]:
    """Mean loss over the fixed evaluation batches of the train and val splits."""
    model.eval()
    means: list[float] = []
    streams: tuple[BatchStream, ...] = ("eval_train", "eval_val")
    for stream in streams:
        losses = torch.zeros(config.eval_iters)  # (eval_iters,)
        for k in range(config.eval_iters):
            inputs, targets = corpus.batch(
                stream,
                index=k,
                seed=config.seed,
                batch_size=config.batch_size,
                block_size=config.block_size,
            )
            _, loss = model(inputs, targets)
            assert loss is not None
            losses[k] = loss.item()
        means.append(losses.mean().item())
    model.train()
    return means[0], means[1]
