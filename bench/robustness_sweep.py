"""Robustness sweep: train variants of the fixture runs with the real `transformers.Trainer`,
analyze each with `tscope.analyze`, and say what was caught, what was missed, what fired wrongly.

    .venv/bin/python bench/robustness_sweep.py                     # every variant, ~4 min on 2 cores
    .venv/bin/python bench/robustness_sweep.py --only lr_jump_x10_s100 --only control_seed1
    .venv/bin/python bench/robustness_sweep.py --keep /tmp/tscope-sweep   # keep the runs there
    .venv/bin/python bench/robustness_sweep.py --keep /tmp/tscope-sweep --reuse  # analyze again,
                                                                    # train only what is missing
    .venv/bin/python bench/robustness_sweep.py --list               # the variants, nothing run

The committed fixtures (fixtures/data/trainer/) are one seed, one planted step and one strength
per cause. The variants here move each of those: other seeds, logging_steps=10, a linear, a
constant-with-warmup and a twice-as-hot cosine schedule, a corrupted batch at other steps (also
in warm-up) and with 1, 3 or all 24 samples replaced, LR jumps with other factors (×2 to ×20),
steps (also in warm-up), a one-step window and logging_steps=10, slower LR runaways, resumes
without scheduler.pt from other checkpoints, and a benign resume. `--list` prints them.

How a run is made: the fixture generator's own pieces, imported from fixtures/ and not copied:
`trainer_run_specs.RunSpec`/`Phase`, the planted causes in `planted.py`, and
`make_trainer_runs.run_phase`, which trains one phase. `run_phase` reads its run from
`make_trainer_runs.RUNS`, its seed from `make_trainer_runs.SEED` and writes relative to its working
directory, so each phase runs in a fresh child process of this script (`--phase`, internal) that
registers the variant's spec in `RUNS`, sets `SEED`, and runs with the output root as working
directory. Without --keep the runs go to a temporary directory that is deleted at the end; nothing
is ever written into the repository (no bytecode either).

What counts as a hit (per planted cause; steps are the Trainer's global_step):
- corrupted_batch at step s (with logging_steps L: the logged step ⌈s/L⌉·L that contains it): the
  largest train/loss spike peaks there (±1) and some finding sits there (±1); the status must be
  "incident" when the spike is clear in the logs. How visible it is comes from an own measure
  (below): ≥ 8 and the largest excursion of the run = clear; ≥ 5 and the largest = visible; a
  failed check on a cause that is not visible is scored "n/a" (not in the logs), not a miss.
- lr_jump at step s: an `lr_schedule_jump` finding at s (±1) among the top 3 findings.
- lr_runaway: `loss_divergence` is the first finding, and some LR finding (`lr_too_high` or
  `lr_schedule_jump`) exists.
- resume without scheduler.pt from checkpoint-R: a warning or critical `resume_discontinuity` at
  step R or R+1, plus `optimizer_state_reset`, plus `checkpoint_incomplete` when checkpoint-R is
  still on disk (save_total_limit=3 rotates an early one away before the run ends).
- controls (other seeds, schedules, logging interval, a benign resume): no warning, no critical.
  A benign resume may carry an info `resume_discontinuity`.
A false alarm is any warning/critical finding on a control, or on a planted run a warning/critical
finding outside the steps the cause can explain (listed per variant as "related steps"; findings
from checkpoints may sit at the first checkpoint after that window).

The own measure (corrupted batch only, independent of tscope's detectors): the logged loss minus
the linear trend of the 6 logged points before it, in units of 1.4826·MAD of those residuals over
the (up to) 50 points before; the rank says whether any other step of the run has a larger
excursion by the same measure. After the table, one section per variant gives the checks, this
measure, the logged loss/LR/grad_norm around the planted step, tscope's verdict and every
warning/critical finding (false alarms with their evidence and threshold).

The exit code is 0 whatever the results (this is a measurement, not a test); 2 when a run could
not be trained.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

# Set before any sweep_* module (or fixtures/, through them) is imported: no __pycache__ in bench/.
sys.dont_write_bytecode = True

from sweep_fixtures import REPO_ROOT  # noqa: E402
from sweep_report import details, planted_cell, table  # noqa: E402
from sweep_runner import child_phase, train  # noqa: E402
from sweep_scoring import Outcome, analyze  # noqa: E402
from sweep_variants import build_variants  # noqa: E402

# ---------------------------------------------------------------------------------------------
# Main
# ---------------------------------------------------------------------------------------------


def _inside_repository(path: Path) -> bool:
    try:
        path.resolve().relative_to(REPO_ROOT)
    except ValueError:
        return False
    return True


def main(argv: list[str] | None = None) -> int:
    variants = build_variants()
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--only", action="append", choices=sorted(variants), help="run this variant (repeatable)"
    )
    parser.add_argument("--keep", type=Path, help="write the runs here and keep them")
    parser.add_argument(
        "--reuse",
        action="store_true",
        help="with --keep: analyze runs already trained there, train only the missing ones",
    )
    parser.add_argument("--list", action="store_true", help="list the variants and exit")
    parser.add_argument(
        "--phase", nargs=3, metavar=("RUN", "INDEX", "RECORD"), help=argparse.SUPPRESS
    )
    options = parser.parse_args(argv)
    if options.phase:
        name, index, record = options.phase
        child_phase(name, int(index), record)
        return 0
    if options.list:
        for v in variants.values():
            print(f"{v.name:28} seed {v.seed:<5} {planted_cell(v)}")
        return 0
    if options.reuse and options.keep is None:
        parser.error("--reuse needs --keep DIR")
    if options.keep is not None and _inside_repository(options.keep):
        parser.error("--keep must be outside the repository (generated runs never go into it)")

    chosen = [variants[name] for name in options.only] if options.only else list(variants.values())
    started = time.monotonic()
    if options.keep is not None:
        root = options.keep.resolve()
        root.mkdir(parents=True, exist_ok=True)
        cleanup: Callable[[], None] = lambda: None  # noqa: E731
    else:
        root = Path(tempfile.mkdtemp(prefix="tscope-sweep-"))
        cleanup = lambda: shutil.rmtree(root, ignore_errors=True)  # noqa: E731
    print(f"runs under {root}", file=sys.stderr, flush=True)
    outcomes: list[Outcome] = []
    try:
        for variant in chosen:
            train_seconds: float | None = None
            if not (options.reuse and (root / f"{variant.name}.done").exists()):
                try:
                    train_seconds = train(variant, root)
                except RuntimeError as error:
                    print(f"error: {error}", file=sys.stderr)
                    return 2
            outcome = analyze(variant, root, train_seconds)
            outcomes.append(outcome)
            print(
                f"{variant.name}: {outcome.result}, {len(outcome.false_alarms)} false alarm(s) "
                + ("(reused, " if train_seconds is None else f"(train {train_seconds:.0f} s, ")
                + f"analyze {outcome.analyze_seconds:.1f} s)",
                file=sys.stderr,
                flush=True,
            )
    finally:
        cleanup()
    wall = time.monotonic() - started
    print(table(outcomes))
    hits = sum(o.hit for o in outcomes)
    scored = sum(o.result in ("HIT", "MISS") for o in outcomes)
    unscored = sum(o.result == "n/a" for o in outcomes)
    errors = sum(o.result == "ERROR" for o in outcomes)
    alarms = sum(len(o.false_alarms) for o in outcomes)
    print(
        f"\n{hits}/{scored} scored variants hit; {unscored} n/a (cause not visible in the logs); "
        f"{errors} error(s); {alarms} false alarm(s); wall time {wall:.0f} s"
    )
    print(details(outcomes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
