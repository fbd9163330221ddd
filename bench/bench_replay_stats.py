"""Benchmark: a replay with every statistic on (tscope.replay.stats) against a plain replay.

    python bench/bench_replay_stats.py                 # both models
    python bench/bench_replay_stats.py --model fixture --steps 60
    python bench/bench_replay_stats.py --per-observer  # the cost of each statistic alone

Both sides run the replay's own loop (tscope.replay.loop.run_steps) under the replay's
deterministic settings (one CPU thread), on the same randomly initialised GPT-2 and the same
batches, from step 1:

* fixture  — the Trainer fixtures' model: 2 layers, n_embd 24, 2 heads, n_inner 48, vocab 96,
             batches of 24 × 64 tokens (13.6k parameters, ~10-20 ms a step).
* gpt2-3m  — 4 layers × 256 wide, 4 heads, vocab 96, 24 × 64 tokens (3.2M parameters).

Time: one process holds two identical models, one replayed plainly and one with the statistics,
and steps them in turn (step k plain, step k observed, who goes first alternating), so both
sides see the same machine load; a step's time is the process CPU time of its run_steps call.
The first WARMUP_STEPS steps are dropped; reported: the medians of the per-step times and of the
per-step ratios. Goal (the issue): statistics ≤ 1.5 × the plain replay's time on CPU.

Memory: two more child processes (plain, statistics) run the steps alone and report their peak
RSS (`resource.getrusage`) with MALLOC_MMAP_THRESHOLD_ fixed at EXACT_MMAP_THRESHOLD: glibc then
returns every tensor above it to the system when freed, so peak RSS follows the live tensors
(with its default dynamic threshold, peak RSS moves by tens of MiB with the order of frees). The
statistics add one copy of the trainable weights (the update-ratio snapshot) and per-step
scalars. Numbers only: nothing here asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from typing import Any

MIB = 1 << 20
WARMUP_STEPS = 2  # allocator and autograd warm-up: the first steps are slower on both sides
MODELS: dict[str, dict[str, Any]] = {
    "fixture": {"n_layer": 2, "n_embd": 24, "n_head": 2, "n_inner": 48},
    "gpt2-3m": {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_inner": None},
}
DEFAULT_STEPS = {"fixture": 40, "gpt2-3m": 8}
ROWS, TIME, VOCAB = 24, 64, 96  # the fixtures' batch: 24 sequences of 64 tokens
GOAL_RATIO = 1.5
EXACT_MMAP_THRESHOLD = 65536  # bytes: far below one activation of either model


class Replay:
    """One model, its optimizer and the loop settings, replayed one step per call."""

    def __init__(self, model_name: str, steps: int, names: list[str] | None) -> None:
        import torch
        import transformers
        from transformers import GPT2Config, GPT2LMHeadModel

        from tscope.replay.entry import Entry
        from tscope.replay.loop import LoopSettings
        from tscope.replay.losses import MODEL_LOSS
        from tscope.replay.lr_source import LrPlan
        from tscope.replay.stats import statistics_observers

        transformers.logging.set_verbosity_error()
        torch.manual_seed(0)
        config = GPT2Config(
            vocab_size=VOCAB, n_positions=TIME, bos_token_id=0, eos_token_id=0, **MODELS[model_name]
        )
        self.model = GPT2LMHeadModel(config)
        self.model.train()
        generator = torch.Generator().manual_seed(1)
        batches = []
        for _ in range(steps):
            tokens = torch.randint(0, VOCAB, (ROWS, TIME), generator=generator)  # (B, T)
            batches.append({"input_ids": tokens, "labels": tokens.clone()})
        self.entry = Entry(path="<bench>", batches=lambda start: iter(batches[start:]))
        self.optimizer = torch.optim.AdamW(self.model.parameters(), lr=1e-3, fused=True)
        observers = [] if names is None else statistics_observers(self.model, names=names or None)
        self.settings = LoopSettings(
            device=torch.device("cpu"),
            loss_path=MODEL_LOSS,
            normaliser=None,
            max_grad_norm=1.0,
            observers=tuple(observers),
        )
        self.plan = LrPlan(source="constant", group_lrs={s: (1e-3,) for s in range(1, steps + 1)})
        self.layer_entries = 0

    def step(self, step: int) -> float:
        """Replay one step; its process CPU seconds."""
        from tscope.replay.loop import run_steps

        started = time.process_time()
        records, _ = run_steps(
            self.model, self.optimizer, self.entry, step, step, self.plan, self.settings
        )
        seconds = time.process_time() - started
        self.layer_entries = len(records[0].layers)
        return seconds


def paired(model_name: str, names: list[str], steps: int) -> dict[str, Any]:
    """Plain and observed replays stepped in turn in this process."""
    from tscope.replay.determinism import replay_settings

    plain, observed = Replay(model_name, steps, None), Replay(model_name, steps, names)
    plain_seconds, observed_seconds = [], []
    with replay_settings("cpu"):
        for step in range(1, steps + 1):
            if step % 2:
                first, second = plain.step(step), observed.step(step)
            else:
                second, first = observed.step(step), plain.step(step)
            plain_seconds.append(first)
            observed_seconds.append(second)
    return {
        "plain": plain_seconds[WARMUP_STEPS:],
        "observed": observed_seconds[WARMUP_STEPS:],
        "parameters": sum(p.numel() for p in plain.model.parameters()),
        "layer_entries": observed.layer_entries,
    }


def alone(model_name: str, names: list[str] | None, steps: int) -> dict[str, Any]:
    """One replay alone in this process, for its peak RSS."""
    from tscope.replay.determinism import replay_settings

    replay = Replay(model_name, steps, names)
    with replay_settings("cpu"):
        for step in range(1, steps + 1):
            replay.step(step)
    return {"peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB}


def run_child(kind: str, model_name: str, names: list[str] | None, steps: int) -> dict[str, Any]:
    argument = "plain" if names is None else ",".join(names) or "all"
    command = [sys.executable, __file__, "--child", kind, model_name, argument, str(steps)]
    env = dict(os.environ)
    if kind == "alone":
        env["MALLOC_MMAP_THRESHOLD_"] = str(EXACT_MMAP_THRESHOLD)
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"child {kind} {model_name} {argument} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compare(model_name: str, names: list[str], steps: int) -> None:
    label = ",".join(names) or "all statistics"
    timing = run_child("paired", model_name, names, steps)
    plain_rss = run_child("alone", model_name, None, steps)["peak_rss_mib"]
    observed_rss = run_child("alone", model_name, names, steps)["peak_rss_mib"]
    plain_step = statistics.median(timing["plain"])
    observed_step = statistics.median(timing["observed"])
    ratios = [o / p for p, o in zip(timing["plain"], timing["observed"], strict=True)]
    ratio = statistics.median(ratios)
    verdict = "ok" if ratio <= GOAL_RATIO else f"over the {GOAL_RATIO}x goal"
    print(
        f"{model_name:8s} {timing['parameters'] / 1e6:5.2f}M params  {label:>14s}: "
        f"plain {1000 * plain_step:7.2f} ms/step, with {1000 * observed_step:7.2f} ms/step "
        f"(CPU time, {len(ratios)} paired steps) -> x{ratio:.2f} [{verdict}]; "
        f"peak RSS {plain_rss:.1f} -> {observed_rss:.1f} MiB; "
        f"{timing['layer_entries']} layer entries per step",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), action="append")
    parser.add_argument("--steps", type=int, help="steps per replay (default: per model)")
    parser.add_argument("--per-observer", action="store_true")
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        kind, model_name, argument, steps = args.child
        names = None if argument == "plain" else [] if argument == "all" else argument.split(",")
        if kind == "paired":
            print(json.dumps(paired(model_name, names or [], int(steps))))
        else:
            print(json.dumps(alone(model_name, names, int(steps))))
        return
    from tscope.replay.stats import OBSERVER_NAMES

    sets: list[list[str]] = [[]]
    if args.per_observer:  # the router has nothing to measure in a dense GPT-2
        sets += [[name] for name in OBSERVER_NAMES if name != "router"]
    for model_name in args.model or list(MODELS):
        for names in sets:
            compare(model_name, names, args.steps or DEFAULT_STEPS[model_name])


if __name__ == "__main__":
    main()
