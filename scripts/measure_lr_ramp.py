"""Measure the lr_ramp rule (analyzers/explainers/lr_ramp.py) on logged learning rates.

    .venv/bin/python scripts/measure_lr_ramp.py RUN_OR_LOG ...       # benchmark run folders, logs
    .venv/bin/python scripts/measure_lr_ramp.py --bench-split dev     # every cached dev run

For every input that logs an LR it prints the statistic the rule compares with RAMP_MIN_FACTOR
(the largest LR after the warm-up's peak over that peak), the warm-up peak's step, and the ramp
the rule finds (start, crossing, 2× step, growth per step) or "-", and where each upward LR jump
lands over the run's earlier peak (lr_schedule_jump's restart band). A benchmark run folder (with
truth.json) also prints its planted cause and step, so a firing is scored as a hit (an lr_ramp
run), a false alarm (anything else) or a miss. The numbers next to the constants come from here.

    .venv/bin/python scripts/measure_lr_ramp.py --train-synthetic /tmp/lr-bench   # then measure

trains (with the benchmark's own producers and generator, into that cache) healthy runs on the
legitimate schedules that rise again after their warm-up (`schedules.EXTRA_SCHEDULES`: cosine
with hard restarts, triangular cycles, warm-up–stable–decay, inverse square root, a re-warm-up
half way) and LR ramps planted on top of some of them, and measures every one.
"""

from __future__ import annotations

import argparse
import itertools
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _inputs(path: Path) -> list[Path]:
    run = path / "run"
    return [run if run.is_dir() else path]


def measure(path: Path) -> str:
    from tscope.analyzers.explainers.lr_ramp_shape import lr_ramp, warmup_peak_index
    from tscope.ingest.inputs import ReadOptions, read_inputs
    from tscope.model.metric_names import LEARNING_RATE

    truth_path = path / "truth.json"
    truth = json.loads(truth_path.read_text()) if truth_path.is_file() else {}
    cause = str(truth.get("cause") or ("control" if truth else "real"))
    planted = truth.get("step")
    inputs = read_inputs(_inputs(path), ReadOptions(False, False, None))
    run = inputs.run
    schedule = str(truth.get("spec", {}).get("schedule", ""))
    label = f"{truth.get('name', path.name)[:40]:40} {schedule:15} {cause:18} {planted!s:>5}"
    if not run.has(LEARNING_RATE):
        return f"{label}  no LR logged"
    steps, lrs = run.series(LEARNING_RATE)
    finite = np.isfinite(lrs)
    steps, lrs = steps[finite], lrs[finite]
    peak = warmup_peak_index(lrs) if lrs.size else None
    if peak is None or lrs[peak] <= 0:
        return f"{label}  warm-up never ended ({lrs.size} LR points)"
    ratio = float(lrs[peak:].max() / lrs[peak])
    ramp = lr_ramp(steps, lrs)
    found = (
        "-"
        if ramp is None
        else (
            f"RAMP start {ramp.start_step} cross {ramp.cross_step} ×2 {ramp.double_step} "
            f"top ×{ramp.factor:.2f}@{ramp.top_step} growth {ramp.growth_per_step:.3f} "
            f"({ramp.rising_points} pts)"
        )
    )
    verdict = ""
    if truth:
        if cause == "lr_ramp":
            verdict = "HIT" if ramp is not None else "MISS"
        elif ramp is not None:
            verdict = "FALSE ALARM"
    elif ramp is not None:
        verdict = "FALSE ALARM?"
    return (
        f"{label}  peak@{int(steps[peak])} max/peak {ratio:7.3f}  {found} {verdict}"
        + _jumps_to_peak(steps, lrs)
    )


def _jumps_to_peak(steps: np.ndarray, lrs: np.ndarray) -> str:
    """Each upward LR jump's landing over the run's earlier peak (the restart band's statistic,
    learning_rate.RESTART_PEAK_BAND)."""
    from tscope.analyzers.explainers.learning_rate import lr_jumps

    landings = [
        f"{jump.step}:{jump.after / float(lrs[: jump.index].max()):.3f}"
        for jump in lr_jumps(steps, lrs)
        if jump.factor > 1 and lrs[: jump.index].max() > 0
    ]
    return f"  up-jumps/earlier peak {' '.join(landings)}" if landings else ""


def synthetic_specs() -> list[Any]:
    """Healthy runs on every extra schedule for three producers, and ramps planted on them."""
    sys.path.insert(0, str(ROOT / "bench" / "accuracy"))
    import paths as bench_paths  # noqa: F401  (puts fixtures/ on sys.path)
    from schedules import EXTRA_SCHEDULES
    from spec import CONTROL, LR_RAMP, RunSpec

    common: dict[str, Any] = {
        "hidden": 32,
        "layers": 2,
        "heads": 2,
        "batch_size": 8,
        "grad_accum": 1,
        "warmup_steps": 10,
        "precision": "fp32",
        "data_order": "shuffled",
    }
    specs = []
    for number, (producer, schedule) in enumerate(
        itertools.product(("nanogpt", "trainer_gpt2", "trainer_llama"), EXTRA_SCHEDULES)
    ):
        steps = 90 + 10 * (number % 4)
        model = {"trainer_gpt2": "gpt2", "trainer_llama": "llama"}.get(producer, "nanogpt")
        shape = {**common, "steps": steps, "save_every": steps // 3, "schedule": schedule}
        lr = (1e-3, 2e-3, 3e-3)[number % 3]
        specs.append(
            RunSpec(producer, 80, 1000 + 2 * number, model, cause=CONTROL, peak_lr=lr, **shape)
        )
        if producer == "nanogpt" or schedule in ("cyclic", "inverse_sqrt"):
            plant = {"step": steps // 2, "growth": (1.04, 1.07, 1.1)[number % 3]}
            specs.append(
                RunSpec(
                    producer,
                    81,
                    2000 + 2 * number,
                    model,
                    cause=LR_RAMP,
                    plant=plant,
                    peak_lr=lr,
                    **shape,
                )
            )
    return specs


def train_synthetic(cache: Path, jobs: int) -> list[Path]:
    specs = synthetic_specs()
    from generate import generate, run_folder

    for failure in generate(cache, specs, jobs):
        print("FAILED", failure, flush=True)
    return [run_folder(cache, s) for s in specs]


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("paths", nargs="*", type=Path)
    parser.add_argument("--bench-split", help="every cached benchmark run of this split")
    parser.add_argument("--train-synthetic", type=Path, help="train synthetic runs into this cache")
    parser.add_argument("--jobs", type=int, default=1)
    args = parser.parse_args()
    paths = list(args.paths)
    if args.train_synthetic:
        paths += train_synthetic(args.train_synthetic, args.jobs)
    if args.bench_split:
        sys.path.insert(0, str(ROOT / "bench" / "accuracy"))
        from generate import run_folder
        from paths import default_cache
        from spec import build_specs, select

        cache = default_cache()
        paths += [run_folder(cache, s) for s in select(build_specs(), args.bench_split)]
    for path in paths:
        try:
            print(measure(path), flush=True)
        except Exception as error:  # a measurement: report the input and go on
            print(f"{path}: {type(error).__name__}: {error}", flush=True)


if __name__ == "__main__":
    main()
