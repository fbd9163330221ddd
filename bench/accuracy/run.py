"""The accuracy benchmark: generate what the cache lacks, analyze every run, score, report.

    .venv/bin/python bench/accuracy/run.py --split dev                 # train what is missing, score
    .venv/bin/python bench/accuracy/run.py --split dev --write-docs    # ... and rewrite docs/accuracy.md
    .venv/bin/python bench/accuracy/run.py --split dev --no-generate   # score what is cached only
    .venv/bin/python bench/accuracy/run.py --split dev --producer nanogpt --runs   # + a per-run table

The test split is for the closing note: it is scored like dev (nothing is refused) and every
output says which split it is. Results (every run's headline and alerts) are also written as JSON
to `<cache>/results-<split>.json`. Exit code 0 whatever the numbers (a measurement, not a test);
1 when a run could not be trained.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import paths
import report
from generate import generate, is_done, run_folder
from score import healthy_real_logs, score_all, to_json
from spec import PRODUCERS, SPLITS, build_specs, select

DOCS_PATH = paths.REPO_ROOT / "docs" / "accuracy.md"
REALDATA = paths.REPO_ROOT.parent / "shared" / "realdata"
DOCS_HEADER = """# Diagnosis accuracy benchmark

Measured by `bench/accuracy/` on runs made by real producers (`transformers.Trainer` with tiny
random GPT-2 and Llama models, a plain-torch nanoGPT-style loop, Lightning), each with one planted
cause at a random step and strength, plus healthy controls. Regenerate this page with

    .venv/bin/python bench/accuracy/run.py --split dev --write-docs

(runs are trained into a cache outside the repository, `~/.cache/tscope-bench` or
`$TSCOPE_BENCH_CACHE`, and only what is missing is trained). The runs are never committed; the
generator, the ground truth it writes (`truth.json` next to each run) and the scorer are.
This page is the **dev** split, the one the rules are tuned on; the held-out splits' scores, each
taken once, are recorded in [accuracy-heldout.md](accuracy-heldout.md), and the score on setups the
benchmark never draws (other schedules, averaged logging, fp16, SGD/Adafactor, long runs) in
[accuracy-ood.md](accuracy-ood.md).

## How it is scored

- **Headline right**: `summary.status` is `incident` and the cause the summary card names
  (`summary.card.cause.category`) is one that counts for the planted cause (table below), at a
  step inside the cause's window (`bench/accuracy/causes.py`: the planted step ±1 for one-step
  causes; a checkpoint finding may sit at the first checkpoint after it; an LR ramp or a frozen
  layer from its first step on; warm-up too hot in the first 30 steps or fifth of the run;
  repeated data during the repetition). On a control the headline is right when there is no
  incident.
- **Recall** per planted cause: runs with that cause whose headline is right. **Precision** per
  headline category: runs headlined with that cause category whose headline is right.
- **Cause recorded**: headline accuracy is reported over all planted runs and, next to it, over
  the runs whose planted cause left a trace in what the run recorded; no run is dropped from the
  first. The criterion (`score.cause_recorded`) was fixed on 2026-12-02, before the holdout3 split
  was scored, and is computed from the truth and the run's own records only, never from tscope's
  findings. It concerns the bad batch (every other cause counts as recorded): the batch is
  recorded when (a) at least one corrupted row enters the loss the producer logs for that step —
  Lightning with gradient accumulation logs the last micro-batch's loss of each optimizer step
  (lightning 2.x logs `on_step` values once the step's micro-batches are accumulated, the last
  call's value), the Trainer and the benchmark's nanoGPT loop log the mean of the step's
  micro-batches — and (b) the logged loss there stands ≥ 5 robust σ over its local trend (the
  visibility column of the per-run table: the loss minus the linear fit of the points before, in
  1.4826·MAD of those residuals over up to 50 points before). Whether it is also the run's
  largest excursion is not asked: that is how far it stands out from the run's texture, which is
  the rule's problem, not the record's. Measured on the tuning splits: one corrupted row of
  4–16 (or 2 of 8) raises the step's loss 1.09–1.19× its trend, 1.0–5.9 robust σ by this measure
  (healthy controls show one-step bumps of 5–7 σ after warm-up); a row in a micro-batch the
  producer does not log raises it by exactly nothing.
- **False warnings**: any finding of severity warning or critical on a healthy control, and on the
  healthy real logs of `../shared/realdata` (the modded-nanogpt records, the three Trainer
  states, pythia 70m-seed3's segments; not pythia 14m-seed5 nor the Megatron chronicles, which
  hold real events).
- **Calibration**: findings binned by confidence, with the fraction that was right per bin. A
  warning/critical finding is right when it names the planted cause in its window (a cause
  category of the table below, or a finding that names the planted file: a Trainer checkpoint
  missing the `optimizer.pt`/`scheduler.pt` the producer deleted), or is a true observation of
  what the cause did in the cause's window (a loss/gradient spike, divergence, plateau, NaN, large
  updates or weight-norm growth; "LR too high" after an LR jump); a layer "origin" of a global
  cause, another cause's name, or any alert on a control is wrong (`causes.finding_is_right`).
  Every alert finding's confidence is that measured right-rate (`analyzers/calibration.py`): per
  category, severity and evidence band (the rule's prior in tenths, kept as
  `findings[].rule_confidence`), shrunk with 2 pseudo-counts toward the category's other bands and
  that toward the base rate of all alerts; info findings and categories the benchmark never
  produces keep their rule's prior. The table (`analyzers/finding_calibration_table.py`, counts
  next to each rate) is derived from the spent splits the cache keeps (dev, holdout7–11) by one
  command, to re-run after any rule change:

      nice -n 10 .venv/bin/python scripts/derive_calibration.py --score --write

## What counts as right

"""


def _context(specs_count: int, missing: int, seconds: float) -> str:
    import tscope

    note = f"tscope {tscope.__version__}; analyzed in {seconds:.0f} s."
    if missing:
        note += f" **{missing} of {specs_count} runs of this split were not in the cache and are not scored.**"
    return note


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--split", choices=(*SPLITS, "all"), default="dev")
    parser.add_argument("--producer", action="append", default=[], choices=PRODUCERS)
    parser.add_argument("--cache", type=Path, default=paths.default_cache())
    parser.add_argument("--jobs", type=int, default=2)
    parser.add_argument("--no-generate", action="store_true", help="score only what is cached")
    parser.add_argument("--write-docs", action="store_true", help=f"rewrite {DOCS_PATH.name}")
    parser.add_argument("--runs", action="store_true", help="also print the per-run table")
    parser.add_argument("--realdata", type=Path, default=REALDATA)
    parser.add_argument(
        "--results",
        type=Path,
        help="where the per-run JSON goes (default <cache>/results-<split>.json)",
    )
    parser.add_argument("--skip-realdata", action="store_true", help="do not analyze the real logs")
    options = parser.parse_args(argv)
    os.nice(10)
    specs = select(build_specs(), options.split, tuple(options.producer))
    failures: list[str] = []
    if not options.no_generate:
        failures = generate(options.cache, specs, options.jobs)
    cached = [s for s in specs if is_done(options.cache, s)]
    real_logs = []
    if options.realdata.is_dir() and not options.skip_realdata:
        real_logs = healthy_real_logs(options.realdata)
    started = time.monotonic()
    runs, real = score_all([run_folder(options.cache, s) for s in cached], real_logs, options.jobs)
    context = _context(len(specs), len(specs) - len(cached), time.monotonic() - started)
    body = report.markdown(runs, real, options.split, context)
    print(f"=== split: {options.split} ===")
    print("\n".join(body))
    if options.runs:
        print("\n".join(["", "### Per run", "", *report.per_run(runs)]))
    results = options.results or options.cache / f"results-{options.split}.json"
    results.write_text(json.dumps(to_json(runs, real), indent=1), encoding="utf-8")
    print(f"\nper-run results: {results}")
    if options.write_docs:
        text = DOCS_HEADER + "\n".join(
            [
                *report.mapping_table(),
                "",
                "## Results",
                "",
                *body,
                "",
                "### Per run",
                "",
                *report.per_run(runs),
            ]
        )
        DOCS_PATH.write_text(text + "\n", encoding="utf-8")
        print(f"wrote {DOCS_PATH}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
