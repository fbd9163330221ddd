"""Synthetic training logs for bench/synthetic_logs.py: one drawn run per seed, written as a file.

`draw` picks the log's shape (length, logging interval, noise, smoothing, schedule, which series
are logged, names, format, late start, rewind) and optionally one planted event; `series` makes
its per-step loss, LR and gradient norm and logs them as the draw says; `write` writes the CSV or
JSONL file a real loop would. Scoring stays in synthetic_logs.py.
"""

from __future__ import annotations

import csv
import json
import math
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

MAX_NOISE_SD = 5.0
# (loss, lr, grad norm, step) column names of real loops: Trainer-like, nanoGPT-like, Lightning-
# like, Megatron-like, the PyTorch tutorial's SummaryWriter tags.
NAMINGS = (
    ("loss", "learning_rate", "grad_norm", "step"),
    ("train/loss", "train/lr", "train/grad_norm", "iter"),
    ("train_loss", "lr-AdamW", "grad_norm", "global_step"),
    ("lm loss", "learning rate", "grad norm", "iteration"),
    ("Loss/train", "LearningRate", "GradNorm", "step"),
)


@dataclass
class Draw:
    seed: int
    points: int
    log_every: int
    noise: float
    noise_kind: str  # gaussian | student_t | ar1
    smoothing: str  # none | interval_mean | ema | round
    schedule: str
    warmup_fraction: float
    lr_logged: bool
    grad_logged: bool
    naming: int
    fmt: str
    start_offset: int = 0  # the log is an excerpt: its steps start here
    rewind: bool = False  # restarted from a checkpoint: a stretch of steps logged twice
    planted: str | None = None
    planted_step: int | None = None
    window_after: int = 0  # steps after planted_step a headline may sit (a divergence's onset)
    visibility: float | None = None  # a planted break's logged excess in robust σ
    notes: list[str] = field(default_factory=list)


def _schedule(kind: str, steps: np.ndarray, total: int, warmup: int, peak: float) -> np.ndarray:
    t = steps.astype(float)
    ramp = np.minimum(t / max(warmup, 1), 1.0)
    progress = np.clip((t - warmup) / max(total - warmup, 1), 0.0, 1.0)
    if kind == "cosine":
        after = 0.1 + 0.9 * 0.5 * (1 + np.cos(np.pi * progress))
    elif kind == "linear":
        after = 1.0 - progress
    elif kind == "constant":
        after = np.ones_like(t)
    elif kind == "inverse_sqrt":
        after = np.sqrt(max(warmup, 1) / np.maximum(t, max(warmup, 1)))
    else:  # wsd: stable, then a linear decay over the last fifth
        after = np.clip((1.0 - progress) / 0.2, 0.0, 1.0)
    return peak * np.where(t <= warmup, ramp, after)


def draw(seed: int, planted: str | None) -> Draw:
    rng = np.random.default_rng(seed)
    points = int(math.exp(rng.uniform(math.log(20), math.log(6000))))
    return Draw(
        seed=seed,
        points=points,
        log_every=int(rng.choice([1, 1, 1, 5, 10, 50])),
        noise=float(math.exp(rng.uniform(math.log(0.005), math.log(0.08)))),
        noise_kind=str(rng.choice(["gaussian", "student_t", "ar1"])),
        smoothing=str(rng.choice(["none", "none", "interval_mean", "ema", "round"])),
        schedule=str(rng.choice(["cosine", "linear", "constant", "inverse_sqrt", "wsd"])),
        warmup_fraction=float(rng.choice([0.0, 0.01, 0.03, 0.1])),
        lr_logged=bool(rng.random() < 0.7) or planted in ("lr_jump", "lr_spike"),
        grad_logged=bool(rng.random() < 0.6),
        naming=int(rng.integers(len(NAMINGS))),
        fmt=str(rng.choice(["csv", "jsonl"])),
        planted=planted,
        start_offset=int(rng.choice([0, 0, 0, int(rng.integers(1_000, 200_000))])),
        rewind=bool(rng.random() < 0.2),
    )


def series(d: Draw) -> dict[str, np.ndarray]:
    """Per-step loss, LR and gradient norm of the drawn run, then logged as the draw says."""
    rng = np.random.default_rng(d.seed + 10_000)
    total = d.points * d.log_every
    steps = np.arange(1, total + 1)
    floor = rng.uniform(1.5, 4.0)
    start = math.log(rng.choice([256, 1024, 32_000, 50_257]))
    alpha = rng.uniform(0.3, 0.8)
    t0 = rng.uniform(5, 50) * max(1, total // 1000)
    clean = floor + (start - floor) * (steps / t0 + 1) ** -alpha
    if d.noise_kind == "gaussian":
        eps = rng.standard_normal(total)
    elif d.noise_kind == "student_t":
        # Heavy tails (t with 4 degrees of freedom, unit variance), cut at MAX_NOISE_SD: a batch
        # 10 σ off its trend is what a bad batch looks like, not healthy texture.
        eps = np.clip(rng.standard_t(4, total) / math.sqrt(2.0), -MAX_NOISE_SD, MAX_NOISE_SD)
    else:  # sequential data: the batch-to-batch level wanders (AR(1), φ 0.5–0.9) plus white noise
        phi = rng.uniform(0.5, 0.9)
        white = rng.standard_normal(total)
        ar = np.empty(total)
        ar[0] = white[0]
        for i in range(1, total):
            ar[i] = phi * ar[i - 1] + math.sqrt(1 - phi * phi) * white[i]
        eps = 0.7 * ar + 0.7 * rng.standard_normal(total)
    loss = clean * (1 + d.noise * eps)
    warmup = int(d.warmup_fraction * total)
    lr = _schedule(d.schedule, steps, total, warmup, float(10 ** rng.uniform(-4.5, -2.5)))
    grad = (0.3 + 3.0 * np.exp(-steps / (0.05 * total + 10))) * np.exp(
        0.15 * rng.standard_normal(total)
    )
    per_step = PerStep(steps, loss, lr, grad)
    if d.planted is not None:
        _plant(d, rng, per_step)
    return _logged(d, rng, per_step)


@dataclass
class PerStep:
    """The drawn run's optimizer steps and, at each, its loss, LR and gradient norm."""

    steps: np.ndarray
    loss: np.ndarray
    lr: np.ndarray
    grad: np.ndarray


def _plant(d: Draw, rng: np.random.Generator, per_step: PerStep) -> None:
    steps, loss, lr, grad = per_step.steps, per_step.loss, per_step.lr, per_step.grad
    total = steps.size
    at = int(rng.integers(int(0.4 * total), int(0.85 * total)))
    # A planted event acts on a logged step (the interval's last) so that "its step" is defined.
    at = (at // d.log_every + 1) * d.log_every - 1
    at = min(at, total - 1)
    d.planted_step = int(steps[at]) + d.start_offset
    level = float(np.median(loss[max(0, at - 50) : at]))
    if d.planted == "break":
        # ≥ 1.5×: below that, a one-step bump that recovers at once is info by the one severity
        # rule (analyzers/impact.py: healthy real runs show +21–40% data bumps).
        loss[at] = level * rng.uniform(1.5, 3.0)
        grad[at] *= rng.uniform(4, 12)
    elif d.planted == "divergence":
        rate = rng.uniform(0.02, 0.1)
        rise = np.expm1(np.minimum(rate * np.arange(total - at), 3.0))
        # Scored where the clean rise first reaches 3 noise σ: an exponential has no sharper onset.
        d.notes.append(f"visible after {math.log1p(3 * d.noise) / rate:.0f} steps")
        d.window_after = int(math.log1p(3 * d.noise) / rate)
        loss[at:] += level * np.minimum(rise, 10.0)
        grad[at:] *= 1 + 3 * np.minimum(rise, 10.0)
    elif d.planted == "lr_spike":
        # ×5–50 for 1–5 logged points, then the schedule again; the loss answers the next step
        # and decays back over the spike's length and a few steps more.
        factor = float(rng.uniform(5, 50))
        width = d.log_every * int(rng.integers(1, 6))
        lr[at : at + width] *= factor
        k = np.arange(total - at - 1)
        bump = level * 0.2 * math.log(factor) * np.exp(-np.maximum(k - width, 0) / 5.0)
        loss[at + 1 :] += np.where(k < width + 60, bump, 0.0)
        grad[at : at + width] *= 1 + math.log(factor)
        d.window_after = d.log_every  # the loss answers at the next logged point
        d.notes.append(f"lr ×{factor:.1f} for {width} steps")
    elif d.planted == "nan":
        # The loss goes non-finite and stays so (an fp32 overflow the loop did not stop at).
        loss[at:] = np.nan if rng.random() < 0.5 else np.inf
        grad[at:] = np.nan
    elif d.planted == "weights_lost":
        pass  # planted on the logged series (_logged): a restart from scratch at a checkpoint
    else:  # lr_jump: ×5–50 from here on; the loss answers within a few steps and stays up
        factor = float(rng.uniform(5, 50))
        lr[at:] *= factor
        k = np.arange(total - at)
        loss[at:] += level * 0.3 * math.log(factor) * (1 - np.exp(-k / 3.0))
        grad[at:] *= 1 + math.log(factor)
        d.notes.append(f"lr ×{factor:.1f}")


def _logged(d: Draw, rng: np.random.Generator, per_step: PerStep) -> dict[str, np.ndarray]:
    steps, loss, lr, grad = per_step.steps, per_step.loss, per_step.lr, per_step.grad
    k = d.log_every
    logged = steps[k - 1 :: k]
    if d.smoothing == "interval_mean" and k > 1:
        shown = loss[: logged.size * k].reshape(-1, k).mean(axis=1)
    else:
        shown = loss[k - 1 :: k].copy()
    if d.smoothing == "ema":
        beta = float(rng.uniform(0.6, 0.98))
        for i in range(1, shown.size):
            shown[i] = beta * shown[i - 1] + (1 - beta) * shown[i]
    elif d.smoothing == "round":
        shown = np.round(shown, int(rng.choice([2, 3, 4])))
    if d.planted == "break" and d.planted_step is not None:
        d.visibility = _visibility(
            shown, int(np.searchsorted(logged, d.planted_step - d.start_offset))
        )
    columns = {"step": logged, "loss": shown, "lr": lr[k - 1 :: k], "grad": grad[k - 1 :: k]}
    columns["step"] = columns["step"] + d.start_offset
    if d.planted == "weights_lost" and d.planted_step is not None:
        # Resumed from a checkpoint `back` points before the log's end of that attempt, with
        # the weights re-initialized: from the resumed step on, the loss is the run's own from
        # its first point again (the LR and gradient norm go on as logged).
        end = int(np.searchsorted(columns["step"], d.planted_step))
        # Never back into the first tenth: weights lost before the model learned anything leave
        # nothing to see.
        back = int(rng.integers(1, max(2, min(30, end // 3))))
        resume = max(1, end - back)
        d.planted_step = int(columns["step"][resume])
        tail = columns["loss"][: columns["loss"].size - resume]
        again = {name: values[resume:] for name, values in columns.items()}
        again["loss"] = tail
        columns = {name: np.r_[values[:end], again[name]] for name, values in columns.items()}
        d.notes.append(f"resumed at {d.planted_step}, {end - resume} points re-logged")
    if d.rewind and d.planted != "weights_lost":
        # A restart from a checkpoint a few dozen points back, the steps between logged again with
        # fresh noise (the file is appended to), before any planted event.
        at = int(rng.integers(logged.size // 5, logged.size * 2 // 5))
        back = int(rng.integers(5, 40))
        again = {name: values[max(0, at - back) : at].copy() for name, values in columns.items()}
        # Fresh noise at the log's own scale (a smoothed log's is smaller than the batches').
        steps_apart = np.diff(columns["loss"])
        steps_apart = steps_apart[np.isfinite(steps_apart)]
        shown_noise = 1.4826 * float(np.median(np.abs(steps_apart))) / math.sqrt(2)
        again["loss"] = again["loss"] + shown_noise * rng.standard_normal(again["loss"].size)
        columns = {
            name: np.r_[values[:at], again[name], values[at:]] for name, values in columns.items()
        }
    return columns


def _visibility(values: np.ndarray, i: int, half: int = 5, window: int = 50) -> float:
    """The logged point's excess over the median of `half` points each side, in robust σ of the
    other points' excesses within `window` (bench/accuracy's measure of a visible bad batch)."""

    def excess(j: int) -> float:
        around = np.r_[values[max(0, j - half) : j], values[j + 1 : j + 1 + half]]
        return float(values[j] - np.median(around))

    others = [
        excess(j)
        for j in range(max(0, i - window), min(values.size, i + 1 + window))
        if abs(j - i) > 1
    ]
    noise = 1.4826 * float(np.median(np.abs(np.asarray(others) - np.median(others))))
    return excess(i) / noise if noise > 0 else float("inf")


def write(d: Draw, logged: dict[str, np.ndarray], folder: Path) -> Path:
    loss_name, lr_name, grad_name, step_name = NAMINGS[d.naming]
    columns = {step_name: logged["step"], loss_name: logged["loss"]}
    if d.lr_logged:
        columns[lr_name] = logged["lr"]
    if d.grad_logged:
        columns[grad_name] = logged["grad"]
    path = folder / ("metrics.csv" if d.fmt == "csv" else "metrics.jsonl")
    names = list(columns)
    rows = zip(*(columns[n] for n in names), strict=True)
    with path.open("w", newline="") as out:
        if d.fmt == "csv":
            writer = csv.writer(out)
            writer.writerow(names)
            for row in rows:
                writer.writerow([int(row[0]), *(repr(float(v)) for v in row[1:])])
        else:
            for row in rows:
                record: dict[str, float | int] = {names[0]: int(row[0])}
                record.update({n: float(v) for n, v in zip(names[1:], row[1:], strict=True)})
                out.write(json.dumps(record) + "\n")
    return path
