"""Benchmark: a replay with every statistic on (tscope.replay.stats) against a plain replay.

    python bench/bench_replay_stats.py                 # both models, 3 alternating repeats
    python bench/bench_replay_stats.py --model fixture --repeats 5
    python bench/bench_replay_stats.py --per-observer  # the cost of each statistic alone

Both sides run the replay's own loop (tscope.replay.loop.run_steps) under the replay's
deterministic settings (one CPU thread), on the same randomly initialised GPT-2 and the same
batches, from step 1:

* fixture  — the Trainer fixtures' model: 2 layers, n_embd 24, 2 heads, n_inner 48, vocab 96,
             batches of 24 × 64 tokens (13.6k parameters, ~10-20 ms a step).
* gpt2-3m  — 4 layers × 256 wide, 4 heads, vocab 96, 24 × 64 tokens (3.2M parameters).

Each measurement is a fresh child process, so its peak RSS (`resource.getrusage`) is its own;
plain and statistics children alternate. glibc's malloc keeps freed blocks below its dynamic mmap
threshold, so peak RSS there depends on the order of frees as much as on what is alive (tens of
MiB either way on gpt2-3m); the memory pair therefore runs once more with
MALLOC_MMAP_THRESHOLD_ fixed at EXACT_MMAP_THRESHOLD, where every tensor above it is returned to
the system when freed and peak RSS follows the live tensors ("exact RSS"; slower, not timed). A step's time is the process CPU time between two
progress callbacks (the shared box's wall clock wanders with its load); the first
WARMUP_STEPS steps are dropped and the median of the rest is reported, then the median over
repeats. Goal (the issue): statistics ≤ 1.5 × the plain replay's time per step on CPU. Memory:
the statistics add one copy of the trainable weights (the update-ratio snapshot) and per-step
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
    "fixture": {"n_layer": 2, "n_embd": 24, "n_head": 2, "n_inner": 48, "steps": 30},
    "gpt2-3m": {"n_layer": 4, "n_embd": 256, "n_head": 4, "n_inner": None, "steps": 8},
}
ROWS, TIME, VOCAB = 24, 64, 96  # the fixtures' batch: 24 sequences of 64 tokens
GOAL_RATIO = 1.5
EXACT_MMAP_THRESHOLD = 65536  # bytes: glibc's minimum-ish setting, below one activation here


def child(model_name: str, names: list[str] | None) -> dict[str, Any]:
    """One replay in this process; `names` None = plain, [] = every statistic."""
    import torch
    import transformers
    from transformers import GPT2Config, GPT2LMHeadModel

    from tscope.replay.determinism import replay_settings
    from tscope.replay.entry import Entry
    from tscope.replay.loop import LoopSettings, run_steps
    from tscope.replay.losses import MODEL_LOSS
    from tscope.replay.lr_source import LrPlan
    from tscope.replay.stats import statistics_observers

    transformers.logging.set_verbosity_error()
    spec = dict(MODELS[model_name])
    steps = spec.pop("steps")
    torch.manual_seed(0)
    config = GPT2Config(vocab_size=VOCAB, n_positions=TIME, bos_token_id=0, eos_token_id=0, **spec)
    model = GPT2LMHeadModel(config)
    model.train()
    generator = torch.Generator().manual_seed(1)
    batches = []
    for _ in range(steps):
        tokens = torch.randint(0, VOCAB, (ROWS, TIME), generator=generator)  # (B, T)
        batches.append({"input_ids": tokens, "labels": tokens.clone()})
    entry = Entry(path="<bench>", batches=lambda start: iter(batches[start:]))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3, fused=True)
    observers = [] if names is None else statistics_observers(model, names=names or None)
    settings = LoopSettings(
        device=torch.device("cpu"),
        loss_path=MODEL_LOSS,
        normaliser=None,
        max_grad_norm=1.0,
        observers=tuple(observers),
    )
    plan = LrPlan(source="constant", group_lrs={s: (1e-3,) for s in range(1, steps + 1)})
    cpu_seconds: list[float] = []
    last = [time.process_time()]

    def on_step(done: int, total: int, record: Any) -> None:  # progress, one call per step
        now = time.process_time()
        cpu_seconds.append(now - last[0])
        last[0] = now

    with replay_settings("cpu"):
        records, _ = run_steps(model, optimizer, entry, 1, steps, plan, settings, on_step)
    return {
        "cpu_seconds": cpu_seconds[WARMUP_STEPS:],
        "wall_seconds": [r.seconds for r in records[WARMUP_STEPS:]],
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / MIB,
        "parameters": sum(p.numel() for p in model.parameters()),
        "layer_entries": len(records[-1].layers),
    }


def measure(model_name: str, names: list[str] | None, exact_rss: bool = False) -> dict[str, Any]:
    argument = "plain" if names is None else ",".join(names) or "all"
    command = [sys.executable, __file__, "--child", model_name, argument]
    env = dict(os.environ)
    if exact_rss:
        env["MALLOC_MMAP_THRESHOLD_"] = str(EXACT_MMAP_THRESHOLD)
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    if done.returncode != 0:
        raise SystemExit(f"child {model_name} {argument} failed:\n{done.stderr}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def compare(model_name: str, names: list[str], repeats: int) -> None:
    label = ",".join(names) or "all statistics"
    plain_times, stats_times, wall_ratio = [], [], []
    plain_rss, stats_rss = [], []
    info: dict[str, Any] = {}
    for _ in range(repeats):
        plain = measure(model_name, None)
        observed = measure(model_name, names)
        plain_times.append(statistics.median(plain["cpu_seconds"]))
        stats_times.append(statistics.median(observed["cpu_seconds"]))
        wall_ratio.append(
            statistics.median(observed["wall_seconds"]) / statistics.median(plain["wall_seconds"])
        )
        plain_rss.append(plain["peak_rss_mib"])
        stats_rss.append(observed["peak_rss_mib"])
        info = observed
    exact_plain = measure(model_name, None, exact_rss=True)["peak_rss_mib"]
    exact_stats = measure(model_name, names, exact_rss=True)["peak_rss_mib"]
    plain_step, stats_step = statistics.median(plain_times), statistics.median(stats_times)
    ratio = stats_step / plain_step
    verdict = "ok" if ratio <= GOAL_RATIO else f"over the {GOAL_RATIO}x goal"
    print(
        f"{model_name:8s} {info['parameters'] / 1e6:5.2f}M params  {label:>14s}: "
        f"plain {1000 * plain_step:7.2f} ms/step, with {1000 * stats_step:7.2f} ms/step "
        f"(CPU time) -> x{ratio:.2f} [{verdict}]; wall x{statistics.median(wall_ratio):.2f}; "
        f"peak RSS {statistics.median(plain_rss):.0f} -> {statistics.median(stats_rss):.0f} MiB "
        f"(exact {exact_plain:.1f} -> {exact_stats:.1f}); "
        f"{info['layer_entries']} layer entries per step",
        flush=True,
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", choices=sorted(MODELS), action="append")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--per-observer", action="store_true")
    parser.add_argument("--child", nargs=2, metavar=("MODEL", "NAMES"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        model_name, argument = args.child
        names = None if argument == "plain" else [] if argument == "all" else argument.split(",")
        print(json.dumps(child(model_name, names)))
        return
    from tscope.replay.stats import OBSERVER_NAMES

    sets = [[]] + (
        [[name] for name in OBSERVER_NAMES if name != "router"] if args.per_observer else []
    )
    for model_name in args.model or list(MODELS):
        for names in sets:
            compare(model_name, names, args.repeats)


if __name__ == "__main__":
    main()
