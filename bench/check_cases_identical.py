"""Check that a speed change leaves every case byte-identical (issue 15).

    python bench/check_cases_identical.py snapshot /tmp/before     # on the old code
    python bench/check_cases_identical.py compare /tmp/before /tmp/after   # on the new code

`snapshot` runs `tscope analyze` on every input below (the committed fixture runs, held-out
benchmark runs, real public logs, and the demo run when given with --demo) in fresh child
processes and keeps each case.json and case.md; `compare` does the same into a second folder and
compares the two byte for byte, printing each input that differs and exiting 1 if any does. The
benchmark cache is read only; only the spent `holdout` split (indices 50-54) is used.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# The fixture runs are read from this checkout; the code analyzed with is whichever tscope the
# interpreter imports (PYTHONPATH=an old checkout for the snapshot).
BENCH_CACHE = Path.home() / ".cache" / "tscope-bench"
REALDATA = Path(os.environ.get("TSCOPE_REALDATA", ROOT.parent / "shared" / "realdata"))
KEPT = ("case.json", "case.md")


def inputs(demo: Path | None, bench_runs: int) -> dict[str, Path]:
    found: dict[str, Path] = {}
    # The same input paths on both sides: a case names its input's path.
    data = Path(os.environ.get("TSCOPE_FIXTURE_DATA", ROOT / "fixtures" / "data"))
    for group in ("trainer", "trainscope", "sweep", "layer_tb", "fsdp"):
        for run in sorted((data / group).iterdir()) if (data / group).is_dir() else []:
            if run.is_dir():
                found[f"fixture-{group}-{run.name}"] = run
    if BENCH_CACHE.is_dir():
        holdout = sorted(
            run
            for run in BENCH_CACHE.iterdir()
            if run.is_dir() and run.name.split("-")[-2] in {"50", "51", "52", "53", "54"}
        )
        stride = max(1, len(holdout) // max(1, bench_runs))  # spread over producers and causes
        for run in holdout[::stride][:bench_runs]:
            found[f"bench-{run.name}"] = run
    for name in (
        "pythia_wandb_export/14m-seed5.csv",
        "pythia_wandb_export/70m-seed3_0ydn3v9s.csv",
        "megatron_logs/tr1-13B-base__chronicles.log",
        "hf_trainer_state/tinyllama_chat_dpo__trainer_state.json",
    ):
        if (REALDATA / name).exists():
            found["real-" + name.replace("/", "-")] = REALDATA / name
    return ({"demo": demo} if demo is not None else {}) | found


# One child process analyzes every input in turn through the CLI's own entry point (the
# interpreter's start-up, seconds on a loaded machine, is paid once), and records each exit code.
_ANALYZE_EACH = """
import json, sys, traceback
import tscope.cli
for label, path, out, flags in json.loads(sys.argv[1]):
    sys.argv = ["tscope", "analyze", path, "--out", out, "-q", *flags]
    try:
        tscope.cli.main()
        code = 0
    except SystemExit as stop:
        code = stop.code if isinstance(stop.code, int) else 2
    except Exception:
        code = "crash " + traceback.format_exc(limit=3)
    print(json.dumps([label, code]), flush=True)
"""


def analyze_all(targets: dict[str, Path], out: Path, weights: set[str]) -> None:
    out.mkdir(parents=True, exist_ok=True)
    # Checkpoint statistics take minutes on a loaded machine and no speed change here touches
    # them: the logs-and-inventory case (--no-weights), except for the inputs named in `weights`.
    jobs = [
        [label, str(path), str(out / label), [] if label in weights else ["--no-weights"]]
        for label, path in targets.items()
    ]
    child = subprocess.run(
        [sys.executable, "-c", _ANALYZE_EACH, json.dumps(jobs)],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        check=False,
    )
    codes = dict(json.loads(line) for line in child.stdout.splitlines() if line.startswith("["))
    for label in targets:
        (out / f"{label}.rc").write_text(f"{codes.get(label, 'not reached')}\n")
        print(f"{label}: {codes.get(label, 'not reached')}", flush=True)
    if child.returncode:
        print(child.stderr[-2000:])


def compare(before: Path, after: Path) -> int:
    differing = 0
    labels = sorted(path.stem for path in before.glob("*.rc"))
    for label in labels:
        names = [f"{label}.rc"] + [f"{label}/{kept}" for kept in KEPT]
        for name in names:
            old, new = before / name, after / name
            old_bytes = old.read_bytes() if old.exists() else None
            new_bytes = new.read_bytes() if new.exists() else None
            if old_bytes != new_bytes:
                differing += 1
                print(f"DIFFERS: {name}")
    print(f"{len(labels)} inputs compared, {differing} files differ")
    return 1 if differing else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("mode", choices=("snapshot", "compare"))
    parser.add_argument("folders", nargs="+", type=Path)
    parser.add_argument("--demo", type=Path, help="a `tscope demo` run folder to include")
    parser.add_argument("--bench-runs", type=int, default=12)
    parser.add_argument(
        "--weights",
        nargs="*",
        default=["demo", "fixture-trainer-lr_jump"],
        help="labels analyzed with their checkpoint statistics (the rest with --no-weights)",
    )
    arguments = parser.parse_args()
    targets = inputs(arguments.demo, arguments.bench_runs)
    if arguments.mode == "snapshot":
        analyze_all(targets, arguments.folders[0], set(arguments.weights))
        return
    before, after = arguments.folders[0], arguments.folders[1]
    analyze_all(targets, after, set(arguments.weights))
    raise SystemExit(compare(before, after))


if __name__ == "__main__":
    main()
