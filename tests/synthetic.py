"""Seeded synthetic runs with a planted cause, for detector and explainer tests.

Each builder returns a Run made through the real assembly path (LogRead -> assemble_run).
"""

from __future__ import annotations

import numpy as np

from tscope.ingest.assemble import assemble_run
from tscope.model import LogRead, Run, RunEvent
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE, LOSS, LOSS_SCALE


def loss_curve(steps: int, seed: int, noise: float = 0.02) -> np.ndarray:
    """A healthy LM loss: fast early drop toward ~2.5 plus multiplicative batch noise."""
    rng = np.random.default_rng(seed)
    t = np.arange(steps, dtype=float)
    return (2.5 + 2.0 * np.exp(-t / (steps / 8))) * (1 + noise * rng.standard_normal(steps))


def warmup_cosine(steps: int, peak: float = 3e-4, warmup: int = 20) -> np.ndarray:
    t = np.arange(1, steps + 1, dtype=float)
    ramp = peak * np.minimum(t / warmup, 1.0)
    progress = np.clip((t - warmup) / max(steps - warmup, 1), 0, 1)
    return np.where(t <= warmup, ramp, peak * 0.5 * (1 + np.cos(np.pi * progress)))


def grad_norms(steps: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed + 1000)
    return 0.8 * np.exp(0.1 * rng.standard_normal(steps))


def make_run(
    series: dict[str, np.ndarray],
    first_step: int = 1,
    events: list[RunEvent] | None = None,
    extra_reads: list[LogRead] | None = None,
) -> Run:
    rows = []
    for metric, values in series.items():
        for offset, value in enumerate(values):
            rows.append((first_step + offset, metric, float(value), metric))
    read = LogRead(
        kind="synthetic",
        path="synthetic.jsonl",
        metrics=LogRead.rows_to_table(rows, "synthetic.jsonl"),
    )
    read.events.extend(events or [])
    return assemble_run("synthetic", "/synthetic", [read, *(extra_reads or [])], [])


def stable_run(steps: int = 400, seed: int = 0) -> Run:
    return make_run(
        {
            LOSS: loss_curve(steps, seed),
            GRAD_NORM: grad_norms(steps, seed),
            LEARNING_RATE: warmup_cosine(steps),
        }
    )


def bad_batch_run(steps: int = 400, seed: int = 0, at: int = 250, factor: float = 1.8) -> Run:
    loss = loss_curve(steps, seed)
    grads = grad_norms(steps, seed)
    loss[at - 1] *= factor  # step `at` is index at-1
    grads[at - 1] *= 4.0
    return make_run({LOSS: loss, GRAD_NORM: grads, LEARNING_RATE: warmup_cosine(steps)})


def lr_jump_run(steps: int = 400, seed: int = 0, at: int = 240, factor: float = 20.0) -> Run:
    lr = warmup_cosine(steps)
    lr[at - 1 : at + 4] *= factor
    loss = loss_curve(steps, seed)
    grads = grad_norms(steps, seed)
    # The loss reacts one step later and decays back over ~10 steps; the grad norm leads it.
    loss[at : at + 10] += 2.0 * np.exp(-np.arange(10) / 3.0)
    grads[at - 1 : at + 6] *= 6.0
    return make_run({LOSS: loss, GRAD_NORM: grads, LEARNING_RATE: lr})


def lr_blowup_run(steps: int = 400, seed: int = 0) -> Run:
    t = np.arange(steps, dtype=float)
    lr = 1e-4 * np.exp(t / 60.0)  # never stops climbing
    loss = loss_curve(steps, seed)
    grads = grad_norms(steps, seed)
    onset = 300
    loss[onset:] = loss[onset] * np.exp((t[onset:] - onset) / 25.0)
    grads[onset - 15 :] *= np.exp((t[onset - 15 :] - onset + 15) / 10.0)
    loss[-5:] = np.nan
    return make_run({LOSS: loss, GRAD_NORM: grads, LEARNING_RATE: lr})


def fp16_collapse_run(steps: int = 400, seed: int = 0) -> Run:
    scale = np.full(steps, 65536.0)
    for k in range(12):  # halving every 5 steps from step 300, never growing back
        scale[300 + 5 * k :] /= 2
    return make_run(
        {LOSS: loss_curve(steps, seed), LEARNING_RATE: warmup_cosine(steps), LOSS_SCALE: scale}
    )
