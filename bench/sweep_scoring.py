"""Scoring the robustness sweep: tscope's analysis of each run against what was planted in it, and
an own, tscope-independent measure of how visible a corrupted batch is in the logged loss."""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
from sweep_fixtures import SAVE_STEPS
from sweep_variants import Variant
from trainer_manifest import log_history

from tscope.model.categories import ALERT_SEVERITIES

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


def short_finding(finding: Any) -> str:
    step = "-" if finding.step is None else str(finding.step)
    return f"{SEVERITY_LETTER.get(finding.severity, '?')} {finding.category}@{step}"


def _near(finding: Any, step: int, slack: int = STEP_SLACK) -> bool:
    return finding.step is not None and abs(int(finding.step) - step) <= slack


def _log_rows(run_dir: Path) -> dict[int, dict[str, Any]]:
    """Training rows of the newest trainer_state.json (the one tscope also prefers)."""
    return {int(row["step"]): row for row in log_history(run_dir) if "loss" in row}


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
    outcome.status = case.summary.status
    outcome.verdict = case.summary.verdict
    outcome.top = findings[:3]
    outcome.loud = [f for f in findings if f.severity in ALERT_SEVERITIES]
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
                + (", ".join(f"{short_finding(f)} ({f.severity})" for f in resume) or "none raised")
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
            + (", ".join(short_finding(f) for f in anywhere) or "none")
        )
    elif variant.cause == "lr_runaway":
        checks.append(
            ("loss_divergence first", bool(findings) and findings[0].category == "loss_divergence")
        )
        lr = [f for f in findings if f.category in ("lr_too_high", "lr_schedule_jump")]
        checks.append(("an LR finding", bool(lr)))
        outcome.evidence.append(
            "LR findings: " + (", ".join(short_finding(f) for f in lr) or "none")
        )
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
            and f.severity in ALERT_SEVERITIES
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
