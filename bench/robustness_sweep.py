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
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.dont_write_bytecode = True  # importing fixtures/ must leave no __pycache__ in the repository

REPO_ROOT = Path(__file__).resolve().parents[1]
FIXTURES_DIR = REPO_ROOT / "fixtures"
if str(FIXTURES_DIR) not in sys.path:
    sys.path.insert(0, str(FIXTURES_DIR))

import make_trainer_runs  # noqa: E402
import numpy as np  # noqa: E402
import planted  # noqa: E402
import text_corpus  # noqa: E402
from trainer_run_specs import (  # noqa: E402
    SAVE_STEPS,
    SEED,
    TOTAL_STEPS,
    WARMUP_STEPS,
    Phase,
    RunSpec,
)

LOUD = ("critical", "warning")
SEVERITY_LETTER = {"critical": "C", "warning": "W", "info": "i"}
# Own, trend-aware measure of how visible a corrupted batch is in the logged loss (see _excursions):
# at or above CLEAR the run must be "incident"; at or above VISIBLE (and the largest excursion of
# the run) a spike and a finding are required; below, the cause is not in the logs and the variant
# is scored n/a rather than hit or miss.
CLEAR_SPIKE = 8.0
VISIBLE_SPIKE = 5.0
FIT_POINTS = 6  # the local linear trend a logged loss is compared against
MIN_HISTORY = 5  # residuals needed before a point is scored (a sparse log has few)
STEP_SLACK = 1  # a finding within ±1 step of the planted step counts as "at" it


# ---------------------------------------------------------------------------------------------
# Schedules the fixture specs do not have (passed as RunSpec.lr_multiplier -> custom LambdaLR)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinearDecay:
    """Linear warmup, then linear decay to 0 at `total_steps` (the Trainer's "linear")."""

    warmup_steps: int
    total_steps: int

    def __call__(self, scheduler_step: int) -> float:
        if scheduler_step < self.warmup_steps:
            return float(scheduler_step) / float(max(1, self.warmup_steps))
        remaining = self.total_steps - scheduler_step
        return max(0.0, float(remaining) / float(max(1, self.total_steps - self.warmup_steps)))


@dataclass(frozen=True)
class ConstantWithWarmup:
    """Linear warmup, then the peak LR to the end (the Trainer's "constant_with_warmup")."""

    warmup_steps: int

    def __call__(self, scheduler_step: int) -> float:
        if scheduler_step < self.warmup_steps:
            return float(scheduler_step) / float(max(1, self.warmup_steps))
        return 1.0


@dataclass(frozen=True)
class ScaledCosine:
    """The fixtures' warmup + cosine, times `scale` throughout (a hotter but healthy run)."""

    warmup_steps: int
    total_steps: int
    scale: float

    def __call__(self, scheduler_step: int) -> float:
        base = planted.warmup_cosine_multiplier(scheduler_step, self.warmup_steps, self.total_steps)
        return float(self.scale * base)


# ---------------------------------------------------------------------------------------------
# The variants
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    spec: RunSpec
    seed: int
    cause: str | None  # corrupted_batch, lr_jump, lr_runaway, resume_no_scheduler; None = control
    step: int | None  # the first optimizer step the cause acts on (resume: the checkpoint's step)
    strength: str
    expected: tuple[str, ...]  # categories a correct analysis raises (what "hit" checks)
    related: tuple[int, int] | None = None  # steps a warning/critical may sit at on a planted run
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def name(self) -> str:
        return str(self.spec.name)

    @property
    def target(self) -> int | None:
        """The logged step that shows the planted step: with logging_steps L, the logged step k
        averages steps k-L+1..k (loss) or reports step k (LR, grad_norm)."""
        if self.step is None:
            return None
        every = int(self.spec.logging_steps)
        return math.ceil(self.step / every) * every


def _control(name: str, seed: int, description: str, **spec_options: Any) -> Variant:
    spec = RunSpec(
        name=name,
        description=description,
        planted_cause=None,
        expected_categories=(),
        **spec_options,
    )
    return Variant(spec=spec, seed=seed, cause=None, step=None, strength="-", expected=())


def _corrupted(
    name: str, seed: int, step: int, in_batch: tuple[int, ...], logging_steps: int = 1
) -> Variant:
    corruption = planted.BatchCorruption(
        optimizer_step=step,
        in_batch_indices=in_batch,
        generator_seed=7,
        vocab_size=len(text_corpus.VOCABULARY),
    )
    spec = RunSpec(
        name=name,
        description=f"{len(in_batch)} samples of step {step}'s batch replaced by random tokens",
        planted_cause="corrupted_batch",
        expected_categories=("loss_spike", "bad_batch"),
        corruption=corruption,
        logging_steps=logging_steps,
    )
    return Variant(
        spec=spec,
        seed=seed,
        cause="corrupted_batch",
        step=step,
        strength=f"{len(in_batch)}/24 samples",
        expected=("loss_spike",),
        related=(step - 2, step + 10 + logging_steps),
        notes=("bad_batch is reserved for replay; offline, loss_spike is the finding",),
    )


def _lr_jump(
    name: str, seed: int, step: int, window: int, factor: float, logging_steps: int = 1
) -> Variant:
    multiplier = planted.LrJump(
        warmup_steps=WARMUP_STEPS,
        total_steps=TOTAL_STEPS,
        first_step=step,
        window_steps=window,
        factor=factor,
    )
    spec = RunSpec(
        name=name,
        description=f"cosine ×{factor:g} for steps {step}-{step + window - 1}",
        planted_cause="lr_jump",
        expected_categories=("lr_schedule_jump", "loss_spike"),
        lr_multiplier=multiplier,
        logging_steps=logging_steps,
    )
    return Variant(
        spec=spec,
        seed=seed,
        cause="lr_jump",
        step=step,
        strength=f"×{factor:g} for {window} step{'s' if window > 1 else ''}",
        expected=("lr_schedule_jump",),
        related=(step - 2, step + window + 30 + logging_steps),
    )


def _lr_runaway(name: str, seed: int, ramp_step: int, growth: float) -> Variant:
    multiplier = planted.LrRunaway(
        warmup_steps=WARMUP_STEPS, ramp_first_step=ramp_step, growth_per_step=growth
    )
    spec = RunSpec(
        name=name,
        description=f"LR ×{growth:g} every step from step {ramp_step}",
        planted_cause="lr_blowup",
        expected_categories=("lr_too_high", "loss_divergence", "nan_loss", "nonfinite_weights"),
        lr_multiplier=multiplier,
    )
    return Variant(
        spec=spec,
        seed=seed,
        cause="lr_runaway",
        step=ramp_step,
        strength=f"×{growth:g}/step",
        expected=("loss_divergence", "lr_too_high|lr_schedule_jump"),
        related=(ramp_step - 2, TOTAL_STEPS),
    )


def _resume(
    name: str, seed: int, resume_step: int, crash_after: int, delete_scheduler: bool
) -> Variant:
    checkpoint = f"checkpoint-{resume_step}"
    deleted = [f"{checkpoint}/scheduler.pt"] if delete_scheduler else []
    spec = RunSpec(
        name=name,
        description=f"killed after step {crash_after}, resumed from {checkpoint}"
        + (" without its scheduler.pt" if delete_scheduler else " (nothing deleted)"),
        planted_cause="resume_lr_restart" if delete_scheduler else None,
        expected_categories=(
            ("resume_discontinuity", "optimizer_state_reset", "checkpoint_incomplete")
            if delete_scheduler
            else ()
        ),
        phases=(
            Phase("first", crash_after_step=crash_after),
            Phase("resume", resume_from_checkpoint=checkpoint),
        ),
        planted={"deleted_files": deleted},
    )
    if not delete_scheduler:
        return Variant(
            spec=spec,
            seed=seed,
            cause=None,
            step=resume_step,
            strength=f"crash after {crash_after}, nothing deleted",
            expected=(),
            notes=("control: resume_discontinuity may be info only",),
        )
    return Variant(
        spec=spec,
        seed=seed,
        cause="resume_no_scheduler",
        step=resume_step,
        strength=f"crash after {crash_after}, scheduler.pt deleted",
        expected=spec.expected_categories,
        related=(resume_step - 2, TOTAL_STEPS),
    )


def build_variants() -> dict[str, Variant]:
    variants = (
        _control("control_seed1", 1, "stable, seed 1"),
        _control("control_seed2", 2, "stable, seed 2"),
        _control("control_log10_seed3", 3, "stable, seed 3, logging_steps=10", logging_steps=10),
        _control(
            "control_linear",
            SEED,
            "warmup + linear decay (custom LambdaLR)",
            lr_multiplier=LinearDecay(WARMUP_STEPS, TOTAL_STEPS),
        ),
        _control(
            "control_constant_seed4",
            4,
            "warmup + constant LR (custom LambdaLR), seed 4",
            lr_multiplier=ConstantWithWarmup(WARMUP_STEPS),
        ),
        _corrupted("corrupt_s80_6of24", SEED, 80, (2, 5, 11, 13, 17, 22)),
        _corrupted("corrupt_s200_3of24_seed2", 2, 200, (4, 11, 19)),
        _corrupted("corrupt_s145_24of24", SEED, 145, tuple(range(24))),
        _lr_jump("lr_jump_x10_s100", SEED, 100, 5, 10.0),
        _lr_jump("lr_jump_x20_s190_w1_seed1", 1, 190, 1, 20.0),
        _lr_runaway("lr_runaway_x1.05_s100", SEED, 100, 1.05),
        _resume("resume_nosched_ckpt180", SEED, 180, 205, delete_scheduler=True),
        _resume("resume_benign_ckpt120", SEED, 120, 165, delete_scheduler=False),
        # Edges: weaker, earlier, sparser, hotter.
        _control(
            "control_hot_lr_x2_seed5",
            5,
            "warmup + cosine at twice the peak LR (6e-3, custom LambdaLR), seed 5",
            lr_multiplier=ScaledCosine(WARMUP_STEPS, TOTAL_STEPS, 2.0),
        ),
        _corrupted("corrupt_s145_1of24", SEED, 145, (11,)),
        _corrupted("corrupt_s20_6of24_warmup", SEED, 20, (2, 5, 11, 13, 17, 22)),
        _corrupted("corrupt_s145_6of24_log10", SEED, 145, (2, 5, 11, 13, 17, 22), 10),
        _lr_jump("lr_jump_x2_s120", SEED, 120, 5, 2.0),
        _lr_jump("lr_jump_x10_s15_warmup_seed2", 2, 15, 5, 10.0),
        _lr_jump("lr_jump_x10_s148_log10", SEED, 148, 5, 10.0, logging_steps=10),
        _lr_runaway("lr_runaway_x1.03_s60_seed2", 2, 60, 1.03),
        _resume("resume_nosched_ckpt60_seed2", 2, 60, 100, delete_scheduler=True),
    )
    return {variant.name: variant for variant in variants}


# ---------------------------------------------------------------------------------------------
# Training (child process per phase)
# ---------------------------------------------------------------------------------------------


def child_phase(name: str, phase_index: int, record_path: str) -> None:
    """In a fresh interpreter whose working directory is the output root: one phase of a variant,
    trained by the fixture generator's own `run_phase`."""
    variant = build_variants()[name]
    make_trainer_runs.RUNS[name] = variant.spec
    make_trainer_runs.SEED = variant.seed
    make_trainer_runs.run_phase(name, phase_index, record_path)


def train(variant: Variant, root: Path) -> float:
    """Train every phase of `variant` into `root/<name>/`; returns the seconds it took."""
    run_dir = root / variant.name
    if run_dir.exists():
        shutil.rmtree(run_dir)
    run_dir.mkdir(parents=True)
    records = root / "_records"
    records.mkdir(exist_ok=True)
    done = root / f"{variant.name}.done"
    done.unlink(missing_ok=True)
    env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
    started = time.monotonic()
    for index, phase in enumerate(variant.spec.phases):
        if phase.resume_from_checkpoint is not None:
            for relative in variant.spec.planted.get("deleted_files", []):
                (run_dir / relative).unlink()
        record = records / f"{variant.name}-{phase.name}.json"
        command = [sys.executable, str(Path(__file__).resolve()), "--phase"]
        completed = subprocess.run(
            [*command, variant.name, str(index), str(record)],
            cwd=root,
            env=env,
            check=False,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        expected = planted.CRASH_EXIT_CODE if phase.crash_after_step is not None else 0
        if completed.returncode != expected:
            print(completed.stdout[-5000:], file=sys.stderr)
            raise RuntimeError(
                f"{variant.name}/{phase.name}: child exited {completed.returncode}, not {expected}"
            )
    seconds = time.monotonic() - started
    done.write_text(f"{seconds:.1f}\n", encoding="utf-8")
    return seconds


# ---------------------------------------------------------------------------------------------
# Evaluation
# ---------------------------------------------------------------------------------------------


@dataclass
class Outcome:
    variant: Variant
    train_seconds: float | None = None
    analyze_seconds: float = 0.0
    error: str | None = None
    status: str = "?"
    top: list[Any] = field(default_factory=list)
    loud: list[Any] = field(default_factory=list)
    checks: list[tuple[str, bool]] = field(default_factory=list)
    false_alarms: list[Any] = field(default_factory=list)
    evidence: list[str] = field(default_factory=list)
    verdict: str = ""
    not_scored: str | None = None  # why neither hit nor miss (the cause is not in the logs)

    @property
    def hit(self) -> bool:
        return self.error is None and self.not_scored is None and all(ok for _, ok in self.checks)

    @property
    def result(self) -> str:
        if self.error is not None:
            return "ERROR"
        if self.not_scored is not None:
            return "n/a"
        return "HIT" if self.hit else "MISS"


def _short(finding: Any) -> str:
    step = "-" if finding.step is None else str(finding.step)
    return f"{SEVERITY_LETTER.get(finding.severity, '?')} {finding.category}@{step}"


def _near(finding: Any, step: int, slack: int = STEP_SLACK) -> bool:
    return finding.step is not None and abs(int(finding.step) - step) <= slack


def _log_rows(run_dir: Path) -> dict[int, dict[str, Any]]:
    """Training rows of the newest trainer_state.json (the one tscope also prefers)."""
    return {
        int(row["step"]): row for row in make_trainer_runs._log_history(run_dir) if "loss" in row
    }


def _excursions(rows: dict[int, dict[str, Any]]) -> dict[int, float]:
    """Own spike measure per logged step, independent of tscope and aware of the trend: the loss
    minus the linear fit of the FIT_POINTS logged points before it (extrapolated), in units of
    1.4826·MAD of the same residuals over the (up to) 50 points before (at least MIN_HISTORY). A
    falling loss (warm-up) does not hide a bump from it, and a noisy stretch does not make one
    look large."""
    steps = sorted(rows)
    losses = [float(rows[s]["loss"]) for s in steps]
    residuals: dict[int, float] = {}  # index -> residual against the local trend
    for i in range(FIT_POINTS, len(steps)):
        xs = steps[i - FIT_POINTS : i]
        ys = losses[i - FIT_POINTS : i]
        if not all(math.isfinite(v) for v in [*ys, losses[i]]):
            continue
        slope, intercept = np.polyfit(np.asarray(xs, dtype=float), np.asarray(ys), 1)
        residuals[i] = losses[i] - (slope * steps[i] + intercept)
    scores: dict[int, float] = {}
    for i, residual in residuals.items():
        history = [residuals[j] for j in range(max(0, i - 50), i) if j in residuals]
        if len(history) < MIN_HISTORY:
            continue
        centre = _median(history)
        sigma = 1.4826 * _median([abs(h - centre) for h in history])
        if sigma > 0:
            scores[steps[i]] = (residual - centre) / sigma
    return scores


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    middle = len(ordered) // 2
    if len(ordered) % 2:
        return ordered[middle]
    return 0.5 * (ordered[middle - 1] + ordered[middle])


def _around(rows: dict[int, dict[str, Any]], step: int, before: int = 3, after: int = 5) -> str:
    parts = []
    for s in sorted(rows):
        if step - before <= s <= step + after:
            row = rows[s]
            grad = row.get("grad_norm")
            grad_text = "nan" if grad is None or grad != grad else f"{grad:.3g}"
            parts.append(f"{s}: {row['loss']:.3f} (lr {row['learning_rate']:.2e}, gn {grad_text})")
    return "; ".join(parts)


def _related(variant: Variant, finding: Any) -> bool:
    if variant.related is None or finding.step is None:
        return False
    low, high = variant.related
    if finding.source == "checkpoints":  # a checkpoint window closes at the next save
        high = max(high, math.ceil(high / SAVE_STEPS) * SAVE_STEPS)
    return low <= int(finding.step) <= high


def evaluate(variant: Variant, case: Any, run_dir: Path) -> Outcome:
    outcome = Outcome(variant=variant)
    findings = list(case.findings)
    outcome.status = str(case.summary.get("status", "?"))
    outcome.verdict = str(case.summary.get("verdict", ""))
    outcome.top = findings[:3]
    outcome.loud = [f for f in findings if f.severity in LOUD]
    rows = _log_rows(run_dir)
    step = variant.target  # == variant.step with logging_steps=1
    checks = outcome.checks

    if variant.cause is None:
        checks.append(("no warning/critical", not outcome.loud))
        outcome.false_alarms = list(outcome.loud)
        resume = [f for f in findings if f.category == "resume_discontinuity"]
        if variant.spec.phases[-1].resume_from_checkpoint is not None:
            outcome.evidence.append(
                "resume_discontinuity: "
                + (", ".join(f"{_short(f)} ({f.severity})" for f in resume) or "none raised")
            )
    else:
        outcome.false_alarms = [f for f in outcome.loud if not _related(variant, f)]
        assert step is not None
    if variant.cause == "corrupted_batch":
        assert step is not None
        loss_spikes = [s for s in case.spikes if s.metric == "train/loss"]
        largest = max(loss_spikes, key=lambda s: s.magnitude, default=None)
        scores = _excursions(rows)
        score = scores.get(step)
        rank = 1 + sum(1 for v in scores.values() if score is not None and v > score)
        clear = score is not None and score >= CLEAR_SPIKE and rank == 1
        visible = score is not None and score >= VISIBLE_SPIKE and rank == 1
        not_visible = (
            f"not visible in the logs ({'unscored' if score is None else f'{score:.1f}'} σ, "
            f"rank {rank})"
        )
        checks.append(
            (
                f"largest loss spike at {step}",
                largest is not None and abs(largest.peak_step - step) <= STEP_SLACK,
            )
        )
        checks.append((f"a finding at {step}", any(_near(f, step) for f in findings)))
        if clear:
            checks.append(("status incident (spike is clear)", outcome.status == "incident"))
        if not visible and not all(ok for _, ok in checks):
            outcome.not_scored = not_visible  # a miss tscope could not have avoided
        visibility = "clear" if clear else ("visible" if visible else "not visible")
        outcome.evidence.append(
            f"own measure at {step}: {'n/a' if score is None else f'{score:.1f}'} σ above the "
            f"local trend, rank {rank} of {len(scores)} logged steps ({visibility}); "
            "largest loss spike: "
            + (
                "none"
                if largest is None
                else f"peak {largest.peak_step}, {largest.magnitude:.1f} σ ({largest.detectors})"
            )
        )
        outcome.evidence.append(
            f"loss spikes: {[(s.peak_step, round(s.magnitude, 1)) for s in loss_spikes]}"
        )
    elif variant.cause == "lr_jump":
        assert step is not None
        in_top = [f for f in outcome.top if f.category == "lr_schedule_jump" and _near(f, step)]
        checks.append((f"lr_schedule_jump@{step} in top 3", bool(in_top)))
        anywhere = [f for f in findings if f.category in ("lr_schedule_jump", "loss_spike")]
        outcome.evidence.append(
            "lr_schedule_jump/loss_spike anywhere: "
            + (", ".join(_short(f) for f in anywhere) or "none")
        )
    elif variant.cause == "lr_runaway":
        checks.append(
            ("loss_divergence first", bool(findings) and findings[0].category == "loss_divergence")
        )
        lr = [f for f in findings if f.category in ("lr_too_high", "lr_schedule_jump")]
        checks.append(("an LR finding", bool(lr)))
        outcome.evidence.append("LR findings: " + (", ".join(_short(f) for f in lr) or "none"))
        nonfinite = [s for s, row in rows.items() if row.get("grad_norm") != row.get("grad_norm")]
        outcome.evidence.append(
            f"first NaN grad_norm at step {min(nonfinite) if nonfinite else 'never'}; "
            f"loss at 150/180/210/240: "
            + ", ".join(f"{rows[s]['loss']:.3g}" for s in (150, 180, 210, 240) if s in rows)
        )
    elif variant.cause == "resume_no_scheduler":
        assert step is not None
        resume = [
            f
            for f in findings
            if f.category == "resume_discontinuity"
            and f.severity in LOUD
            and f.step is not None
            and step <= f.step <= step + 1
        ]
        checks.append((f"resume_discontinuity ≥ warning at {step}/{step + 1}", bool(resume)))
        checks.append(
            ("optimizer_state_reset", any(f.category == "optimizer_state_reset" for f in findings))
        )
        incomplete = any(f.category == "checkpoint_incomplete" for f in findings)
        if (run_dir / f"checkpoint-{step}").is_dir():
            checks.append(("checkpoint_incomplete", incomplete))
        else:
            outcome.evidence.append(
                f"checkpoint-{step} was rotated away (save_total_limit="
                f"{variant.spec.save_total_limit}), so checkpoint_incomplete is not required; "
                f"raised: {incomplete}; on disk: "
                + ", ".join(sorted(p.name for p in run_dir.glob("checkpoint-*")))
            )
    if variant.step is not None and rows:
        every = variant.spec.logging_steps
        around = _around(rows, variant.step, before=3 * every, after=5 * every)
        outcome.evidence.append(f"logged around {variant.step}: {around}")
    return outcome


def analyze(variant: Variant, root: Path, train_seconds: float | None) -> Outcome:
    import tscope

    run_dir = root / variant.name
    started = time.monotonic()
    try:
        case = tscope.analyze(run_dir)
    except Exception as error:  # report and go on: one broken analysis must not hide the rest
        outcome = Outcome(variant=variant, error=f"{type(error).__name__}: {error}")
    else:
        outcome = evaluate(variant, case, run_dir)
    outcome.analyze_seconds = time.monotonic() - started
    outcome.train_seconds = train_seconds
    return outcome


# ---------------------------------------------------------------------------------------------
# Report
# ---------------------------------------------------------------------------------------------


def _planted_cell(variant: Variant) -> str:
    if variant.cause is None:
        if variant.step is not None:
            return f"control (benign resume @ckpt-{variant.step}; {variant.strength})"
        return "control"
    at = (
        f"ckpt-{variant.step}" if variant.cause == "resume_no_scheduler" else f"step {variant.step}"
    )
    return f"{variant.cause} @{at}, {variant.strength}"


def table(outcomes: list[Outcome]) -> str:
    header = (
        "| variant | seed | planted | expected | tscope top 3 (C/W/i category@step) | status "
        "| result | false alarms |"
    )
    lines = [header, "|" + "---|" * 8]
    for o in outcomes:
        v = o.variant
        expected = ", ".join(v.expected) or "no warning/critical"
        if o.error is not None:
            found, result = f"ERROR {o.error[:80]}", "ERROR"
        else:
            found = "; ".join(_short(f) for f in o.top) or "(none)"
            failed = [name for name, ok in o.checks if not ok]
            result = o.result
            if o.not_scored is not None:
                result = f"n/a: {o.not_scored}"
            elif failed:
                result = "MISS: " + "; ".join(failed)
        alarms = "; ".join(_short(f) for f in o.false_alarms) or "-"
        lines.append(
            f"| {v.name} | {v.seed} | {_planted_cell(v)} | {expected} | {found} | {o.status} "
            f"| {result} | {alarms} |"
        )
    return "\n".join(lines)


def _evidence_text(evidence: dict[str, Any]) -> str:
    text = json.dumps(evidence, default=str, sort_keys=True)
    return text if len(text) <= 400 else text[:400] + "…"


def details(outcomes: list[Outcome]) -> str:
    lines: list[str] = []
    for o in outcomes:
        v = o.variant
        timing = (
            f"train {o.train_seconds:.0f} s, " if o.train_seconds is not None else "reused, "
        ) + f"analyze {o.analyze_seconds:.1f} s"
        lines.append(f"\n## {v.name} — {v.spec.description} (seed {v.seed}; {timing})")
        if o.error is not None:
            lines.append(f"  ERROR {o.error}")
            continue
        if v.related is not None:
            lines.append(f"  related steps: {v.related[0]}-{v.related[1]}")
        for note in v.notes:
            lines.append(f"  note: {note}")
        lines.append(f"  status {o.status}; verdict: {o.verdict}")
        for name, ok in o.checks:
            lines.append(f"  [{'ok' if ok else 'MISS'}] {name}")
        lines.extend(f"  {line}" for line in o.evidence)
        if o.loud:
            lines.append("  warning/critical findings:")
        for f in o.loud:
            flag = "FALSE ALARM " if f in o.false_alarms else ""
            lines.append(
                f"    {flag}{f.severity} {f.category} step {f.step} ({f.source}"
                f"{', layer ' + f.layer if f.layer else ''}): {f.message}"
            )
            if flag:
                lines.append(f"      evidence: {_evidence_text(f.evidence)}")
                if f.threshold:
                    lines.append(f"      threshold: {f.threshold}")
    return "\n".join(lines)


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
            print(f"{v.name:28} seed {v.seed:<5} {_planted_cell(v)}")
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
