"""The out-of-distribution set (ood_spec.py): train what the cache lacks, analyze, score, report.

The first two blocks by default: `ood_spec.SETUPS` (ood00–31) and `ood_spec.SECOND_BLOCK`
(ood32–49). The third, `ood_spec.THIRD_BLOCK` (ood50–69), the fourth, `ood_spec.FOURTH_BLOCK`
(ood70–89), the fifth, `ood_spec.FIFTH_BLOCK` (ood90–109), the sixth, `ood_spec.SIXTH_BLOCK`
(ood110–129), the seventh, `ood_spec.SEVENTH_BLOCK` (ood130–149), the eighth,
`ood_spec.EIGHTH_BLOCK` (ood150–161), the ninth, `ood_spec.NINTH_BLOCK` (ood162–181), and the
tenth, `ood_spec.TENTH_BLOCK` (ood182–201), the eleventh, `ood_spec.ELEVENTH_BLOCK`
(ood202–221), and the twelfth, `ood_spec.TWELFTH_BLOCK` (ood222–241), are held out: only
`--blocks` names them.

    .venv/bin/python bench/ood/run.py                  # train what is missing (1 job), score all
    .venv/bin/python bench/ood/run.py --no-generate    # score what is cached only
    .venv/bin/python bench/ood/run.py --list           # the runs and whether they are cached
    .venv/bin/python bench/ood/run.py --blocks 3       # the third block only (train, score)
    .venv/bin/python bench/ood/run.py --blocks 1,2,3   # all three
    .venv/bin/python bench/ood/run.py --blocks 3 --train-only   # train, analyze nothing
    .venv/bin/python bench/ood/run.py --blocks 4       # the fourth block only (train, score)
    .venv/bin/python bench/ood/run.py --blocks 5       # the fifth block only (train, score)
    .venv/bin/python bench/ood/run.py --blocks 6 --train-only   # the sixth: train only
    .venv/bin/python bench/ood/run.py --blocks 7 --train-only   # the seventh: train only
    .venv/bin/python bench/ood/run.py --blocks 8 --train-only   # the eighth: train only
    .venv/bin/python bench/ood/run.py --blocks 9 --train-only   # the ninth: train only
    .venv/bin/python bench/ood/run.py --blocks 10 --train-only  # the tenth: train only
    .venv/bin/python bench/ood/run.py --blocks 11 --train-only  # the eleventh: train only
    .venv/bin/python bench/ood/run.py --blocks 12 --train-only  # the twelfth: train only

Runs are trained by the accuracy benchmark's producers (bench/accuracy/generate.py, each phase a
fresh `nice -n 10` process that this script serves with `--child`) into `~/.cache/tscope-ood`
(or `$TSCOPE_OOD_CACHE`), never into the repository; each run is scored by the benchmark's
scorer (`score.score_spec`, `causes.py`'s windows). Prints the summary and the per-run table and
writes every run's result to `<cache>/results-ood.json`. Exit code 0 whatever the numbers.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from collections import Counter
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "accuracy"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import generate  # noqa: E402
import report  # noqa: E402
from ood_spec import OodSpec, build_ood_specs  # noqa: E402
from score import RunScore, score_spec, to_json  # noqa: E402
from spec import CONTROL, LR_JUMP_TRANSIENT  # noqa: E402

CACHE_ENV = "TSCOPE_OOD_CACHE"


def default_cache() -> Path:
    override = os.environ.get(CACHE_ENV)
    return Path(override).expanduser() if override else Path.home() / ".cache" / "tscope-ood"


def lr_recorded(spec: OodSpec) -> bool:
    """Whether a transient LR jump shows in the LR the run logs: the Trainer logs the LR only
    every `logging_steps` (the scheduler's LR after step k, the one step k+1 uses), so a jump of
    fewer steps than that may fall between two logged values. Every other cause counts as
    recorded here (a bad batch is judged by the benchmark's own `cause_recorded`)."""
    if spec.cause != LR_JUMP_TRANSIENT or spec.logging_steps == 1:
        return True
    first, window = int(spec.plant["step"]), int(spec.plant["window"])
    return any(k % spec.logging_steps == 0 for k in range(first - 1, first + window - 1))


def score_one(folder: str) -> RunScore:
    truth = json.loads((Path(folder) / "truth.json").read_text(encoding="utf-8"))
    spec = OodSpec.from_json(truth["spec"])
    result = score_spec(spec, folder)
    result.recorded = result.recorded and lr_recorded(spec)
    return result


def per_run_table(specs: list[OodSpec], runs: list[RunScore]) -> list[str]:
    by_name = {r.name: r for r in runs}
    lines = [
        "| run | setup | planted | step | headline (cause @ step confidence) | right | alerts |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for spec in specs:
        run = by_name.get(spec.name)
        if run is None:
            continue
        alerts = Counter(a.category for a in run.alerts)
        listed = ", ".join(f"{c} ×{n}" if n > 1 else c for c, n in sorted(alerts.items())) or "–"
        step = "–" if spec.planted_step is None else str(spec.planted_step)
        planted = spec.cause if run.recorded else f"{spec.cause} (not recorded)"
        right = "yes" if run.right else "**no**"
        lines.append(
            f"| {spec.name} | {spec.setup} | {planted} | {step} | {report.said(run)} | {right} "
            f"| {listed} |"
        )
    return lines


def summary(runs: list[RunScore]) -> list[str]:
    planted = [r for r in runs if r.cause != CONTROL]
    controls = [r for r in runs if r.cause == CONTROL]
    recorded = [r for r in planted if r.recorded]
    warned = [r for r in controls if r.alerts]
    return [
        f"- planted, headline right: {sum(r.right for r in planted)}/{len(planted)}",
        f"- planted, cause recorded: headline right: {sum(r.right for r in recorded)}"
        f"/{len(recorded)}",
        f"- controls with no incident: {sum(r.right for r in controls)}/{len(controls)}",
        f"- controls with a warning/critical: {len(warned)}/{len(controls)}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=default_cache())
    parser.add_argument("--only", action="append", default=[], help="only these run names")
    parser.add_argument("--no-generate", action="store_true", help="score only what is cached")
    parser.add_argument(
        "--blocks",
        default="1,2",
        help="comma-separated blocks (1-12); default 1,2: the third to twelfth are held out",
    )
    parser.add_argument(
        "--train-only", action="store_true", help="train what is missing; analyze and score none"
    )
    parser.add_argument("--list", action="store_true", help="list the runs, train nothing")
    parser.add_argument("--jobs", type=int, default=1)
    parser.add_argument("--results", type=Path, help="default <cache>/results-ood.json")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        module, spec_path, run_dir, phase, record = options.child
        spec = OodSpec.from_json(json.loads(Path(spec_path).read_text(encoding="utf-8")))
        importlib.import_module(module).train_phase(spec, Path(run_dir), phase, Path(record))
        return 0
    blocks = tuple(int(b) for b in options.blocks.split(",") if b.strip())
    if not blocks or not set(blocks) <= set(range(1, 13)):
        parser.error(f"--blocks takes 1 to 12, not {options.blocks!r}")
    specs = build_ood_specs(blocks)
    if options.only:
        specs = [s for s in specs if s.name in set(options.only)]
    if options.list:
        for s in specs:
            state = "cached" if generate.is_done(options.cache, s) else "missing"
            print(f"{s.name:50} {s.steps:5} steps, step {s.planted_step} {s.plant} [{state}]")
        return 0
    os.nice(10)
    failures: list[str] = []
    if not options.no_generate:
        options.cache.mkdir(parents=True, exist_ok=True)
        failures = generate.generate(
            options.cache, list(specs), options.jobs, script=Path(__file__)
        )
    if options.train_only:
        return 1 if failures else 0
    cached = [s for s in specs if generate.is_done(options.cache, s)]
    runs = [score_one(str(generate.run_folder(options.cache, s))) for s in cached]
    print("\n".join(summary(runs)))
    print()
    print("\n".join(per_run_table(cached, runs)))
    results = options.results or options.cache / "results-ood.json"
    results.write_text(json.dumps(to_json(runs, []), indent=1), encoding="utf-8")
    print(f"\nper-run results: {results}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
