"""Train the benchmark's runs into the cache: only what is missing, each phase in a fresh process.

    .venv/bin/python bench/accuracy/generate.py --split dev --jobs 2       # what dev still lacks
    .venv/bin/python bench/accuracy/generate.py --only trainer_gpt2-bad_batch-00

Cache layout: `<cache>/<run name>-<key>/run/` holds what the producer wrote (the only thing tscope
reads), `truth.json` next to it the ground truth (cause, step, strength, producer, split, the spec,
what the planting did, versions, seconds). The key hashes the spec and GENERATOR_VERSION, so a
changed spec is a new folder; a folder without truth.json is unfinished and is trained again.
Children run under `nice -n 10` with one torch thread.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import platform
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import paths
from smoke_runs import smoke_specs
from spec import CONTROL, SPLITS, RunSpec, build_specs, select

PRODUCER_MODULES = {
    "trainer_gpt2": "produce_trainer",
    "trainer_llama": "produce_trainer",
    "nanogpt": "produce_nanogpt",
    "lightning": "produce_lightning",
}
TRUTH_NAME = "truth.json"
RUN_SUBDIR = "run"
CRASH_EXIT_CODE = (
    75  # fixtures/planted.py's CRASH_EXIT_CODE (not imported: it pulls in transformers)
)


def run_folder(cache: Path, spec: RunSpec) -> Path:
    return cache / f"{spec.name}-{spec.key}"


def is_done(cache: Path, spec: RunSpec) -> bool:
    return (run_folder(cache, spec) / TRUTH_NAME).is_file()


def producer(spec: RunSpec) -> Any:
    return importlib.import_module(PRODUCER_MODULES[spec.producer])


def _child(module: str, spec_path: str, run_dir: str, phase: str, record: str) -> None:
    spec = RunSpec.from_json(json.loads(Path(spec_path).read_text(encoding="utf-8")))
    importlib.import_module(module).train_phase(spec, Path(run_dir), phase, Path(record))


def _versions() -> dict[str, str]:
    versions = {"python": platform.python_version()}
    for name in ("torch", "transformers", "lightning"):
        try:
            versions[name] = importlib.import_module(name).__version__
        except ImportError:
            continue
    return versions


def train(cache: Path, spec: RunSpec, script: Path | None = None) -> float:
    """Train `spec` into its cache folder; returns seconds. Raises when a phase fails. `script`
    is what runs each phase (`script --child ...`): this file, or bench/ood's, which reads its
    own spec class."""
    folder = run_folder(cache, spec)
    if folder.exists():
        shutil.rmtree(folder)
    run_dir = folder / RUN_SUBDIR
    run_dir.mkdir(parents=True)
    spec_path = folder / "spec.json"
    spec_path.write_text(json.dumps(spec.to_json(), indent=1), encoding="utf-8")
    module = producer(spec)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1", OMP_NUM_THREADS="1")
    started = time.monotonic()
    notes: list[str] = []
    records: list[Any] = []
    for index, phase in enumerate(module.phases(spec)):
        if index > 0:
            notes.extend(module.between_phases(spec, run_dir))
        record = folder / f"record-{phase}.json"
        child = str((script or Path(__file__)).resolve())
        command = ["nice", "-n", "10", sys.executable, child, "--child"]
        command += [
            PRODUCER_MODULES[spec.producer],
            str(spec_path),
            str(run_dir),
            phase,
            str(record),
        ]
        completed = subprocess.run(
            command,
            env=env,
            check=False,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        (folder / f"output-{phase}.txt").write_text(completed.stdout[-20000:], encoding="utf-8")
        # "first" and bench/ood's "preempted-resume<n>" die like a node failure.
        expected = CRASH_EXIT_CODE if phase == "first" or phase.startswith("preempted") else 0
        if completed.returncode != expected:
            raise RuntimeError(
                f"{spec.name}/{phase}: exit {completed.returncode}, not {expected}:\n"
                + completed.stdout[-3000:]
            )
        if record.is_file():
            records.append(json.loads(record.read_text(encoding="utf-8")))
            record.unlink()
    seconds = time.monotonic() - started
    truth = {
        "name": spec.name,
        "key": spec.key,
        "producer": spec.producer,
        "cause": None if spec.cause == CONTROL else spec.cause,
        "step": spec.planted_step,
        "strength": {k: v for k, v in spec.plant.items() if k != "step"},
        "split": spec.split,
        "seed": spec.seed,
        "spec": spec.to_json(),
        "notes": notes,
        "last_step_per_phase": [r.get("global_step") for r in records],
        "versions": _versions(),
        "seconds": round(seconds, 1),
    }
    (folder / TRUTH_NAME).write_text(json.dumps(truth, indent=1), encoding="utf-8")
    return seconds


def generate(
    cache: Path,
    specs: list[RunSpec],
    jobs: int,
    verbose: bool = True,
    script: Path | None = None,
) -> list[str]:
    """Train every spec not yet in the cache; returns the failures' messages."""
    # Index-major order: the first runs of every (producer, cause) group come first, so a cache
    # filled part way is a balanced sample.
    missing = sorted(
        (s for s in specs if not is_done(cache, s)),
        key=lambda s: (s.index, s.cause == CONTROL, s.producer),
    )
    if verbose:
        print(
            f"{len(specs) - len(missing)} of {len(specs)} runs cached; training {len(missing)}",
            flush=True,
        )
    failures: list[str] = []

    def one(spec: RunSpec) -> None:
        try:
            seconds = train(cache, spec, script)
            if verbose:
                print(f"  {spec.name} ({spec.split}): {seconds:.0f} s", flush=True)
        except Exception as error:
            failures.append(f"{spec.name}: {error}")
            print(f"  FAILED {spec.name}: {str(error)[-2000:]}", file=sys.stderr, flush=True)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        list(pool.map(one, missing))
    return failures


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=(*SPLITS, "all"), default="dev")
    parser.add_argument("--producer", action="append", default=[], help="only these producers")
    parser.add_argument("--only", action="append", default=[], help="only these run names")
    parser.add_argument("--cache", type=Path, default=paths.default_cache())
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--list", action="store_true", help="list the runs, train nothing")
    parser.add_argument("--child", nargs=5, help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.child:
        _child(*options.child)
        return 0
    specs = select(build_specs(), options.split, tuple(options.producer))
    if options.only:
        specs = [s for s in build_specs() + smoke_specs() if s.name in set(options.only)]
    if options.list:
        for s in specs:
            state = "cached" if is_done(options.cache, s) else "missing"
            print(f"{s.name:40} {s.split:4} step {s.planted_step} {s.plant} [{state}]")
        return 0
    failures = generate(options.cache, specs, options.jobs)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
