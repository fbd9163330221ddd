"""Analyze each cached run with `tscope.analyze` (the library call `tscope analyze` makes) and
score it against its ground truth; also count alerts on the healthy real logs.

What is read from the case: `summary.status` and `summary.card` (contract keys: the headline's
cause category, its finding id and confidence, the card's step) and every finding's category,
severity, confidence, step and source. `headline_of` is the only function that knows the case's
shape, so a change of the summary payload is one edit here.
"""

from __future__ import annotations

import json
import sys
import time
import traceback
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import causes
import paths
from spec import BAD_BATCH, CONTROL, RunSpec

from tscope.model.categories import ALERT_SEVERITIES

# The healthy logs of ../shared/realdata (per its README: no incident in them). Excluded: pythia
# 14m-seed5 (a real one-step spike at 95457) and the Megatron chronicles (documented events).
HEALTHY_REAL_LOGS = (
    "modded_nanogpt/runs/*.csv",
    "modded_nanogpt/more_runs/*.csv",
    "hf_trainer_state/baize_tcm_lora__trainer_state.json",
    "hf_trainer_state/tinyllama_chat_dpo__trainer_state.json",
    "hf_trainer_state/whisper_large_v2_ja__trainer_state.json",
    "pythia_wandb_export/70m-seed3_*.csv",
)


@dataclass(frozen=True)
class Headline:
    status: str  # incident | healthy | insufficient_data | error
    category: str | None  # the cause the verdict names (card.cause.category)
    step: int | None  # the step of the cause's finding, else the card's step
    confidence: float | None
    source: str  # where the cause's finding came from ("logs", "checkpoints", ...)
    headline_category: str | None  # the first alert finding's category (F1 of the alerts)


@dataclass(frozen=True)
class Alert:
    category: str
    severity: str
    confidence: float
    step: int | None
    source: str
    right: bool
    rule_confidence: float | None = None  # the rule's prior; `confidence` is the calibrated one


@dataclass
class RunScore:
    name: str
    producer: str
    cause: str
    split: str
    planted_step: int | None
    headline: Headline
    right: bool
    alerts: list[Alert] = field(default_factory=list)
    error: str = ""
    analyze_seconds: float = 0.0
    # Bad batch only: how far the logged loss at the planted step stands out, by the robustness
    # sweep's own measure (sweep_scoring._excursions: robust σ over the local trend), and whether
    # any other step of the run stands out more. None for other causes.
    visibility: float | None = None
    largest_excursion: bool | None = None
    # Whether the planted cause left a trace in what the run recorded (`cause_recorded`); the
    # headline is reported over all runs and over the runs where it did.
    recorded: bool = True


def headline_of(case: Any) -> Headline:
    summary = case.summary
    status = summary.status
    card = summary.card
    alerts = [f for f in case.findings if f.severity in ALERT_SEVERITIES]
    first = alerts[0].category if alerts else None
    if card is None:
        return Headline(status, None, None, None, "logs", first)
    cause = card.cause
    by_id = {f.id: f for f in case.findings}
    finding = by_id.get(cause.finding_id)
    step = finding.step if finding is not None and finding.step is not None else card.step
    source = finding.source if finding is not None else "logs"
    return Headline(status, cause.category, step, cause.confidence, source, first)


def _alerts(spec: RunSpec, case: Any) -> list[Alert]:
    return [
        Alert(
            f.category,
            f.severity,
            float(f.confidence),
            f.step,
            f.source,
            causes.finding_is_right(spec, f.category, f.step, f.source),
            f.rule_confidence,
        )
        for f in case.findings
        if f.severity in ALERT_SEVERITIES
    ]


VISIBLE_SIGMA = 5.0  # the robustness sweep's "visible" (sweep_scoring: >= 5 and the largest)
# The producers whose logged loss of an optimizer step is one micro-batch's, not the step's mean:
# Lightning with accumulate_grad_batches > 1 logs (`self.log(..., on_step=True)`) only once the
# step's micro-batches are accumulated, and what it logs is the last call's value
# (lightning 2.x `_LoggerConnector.update_train_step_metrics`). The Trainer logs the mean of the
# step's micro-batch losses and this benchmark's nanoGPT loop logs their mean
# (produce_nanogpt.py).
LAST_MICRO_BATCH_LOGGED = frozenset({"lightning"})


def logged_corrupted_rows(spec: RunSpec) -> int:
    """How many of the planted bad batch's corrupted rows enter the loss the producer logs for
    the planted step (from the truth's spec and the producer's logging)."""
    from planting import corrupted_rows

    by_call = corrupted_rows(spec)
    if spec.grad_accum > 1 and spec.producer in LAST_MICRO_BATCH_LOGGED:
        last_call = int(spec.plant["step"]) * spec.grad_accum
        return len(by_call.get(last_call, []))
    return sum(len(rows) for rows in by_call.values())


def cause_recorded(spec: RunSpec, visibility: float | None) -> bool:
    """Pre-registered (2026-12-02, before the holdout3 split was scored) and computed from the
    truth and the run's own records only, never from tscope's findings: a planted bad batch is
    recorded when (a) at least one corrupted row enters the loss the producer logs for that step
    (`logged_corrupted_rows`) and (b) the logged loss there stands ≥ VISIBLE_SIGMA robust σ over
    its local trend (`_visibility`, the robustness sweep's measure: the loss minus the linear fit
    of the points before, in 1.4826·MAD of the same residuals over up to 50 points before). Not
    asked: that it is the run's largest excursion (that is how far it stands out from the run's
    texture, which is the rule's problem, not the record's). Every other cause counts as
    recorded."""
    if spec.cause != BAD_BATCH:
        return True
    if visibility is None or logged_corrupted_rows(spec) == 0:
        return False
    return bool(visibility >= VISIBLE_SIGMA)  # a numpy bool when the visibility is numpy's


def _visibility(spec: RunSpec, run: Any) -> tuple[float | None, bool | None]:
    if spec.cause != BAD_BATCH or spec.planted_step is None:
        return None, None
    sys.path.insert(0, str(paths.REPO_ROOT / "bench"))
    from sweep_scoring import _excursions

    from tscope.model.metric_names import LOSS

    steps, values = run.series(LOSS)
    rows = {int(s): {"loss": float(v)} for s, v in zip(steps, values, strict=True)}
    scores = _excursions(rows)
    at = max((scores.get(spec.planted_step + d, float("-inf")) for d in (0, 1)), default=None)
    if at is None or at == float("-inf"):
        return None, None
    others = [v for s, v in scores.items() if abs(s - spec.planted_step) > 1]
    return round(at, 1), all(at > v for v in others)


def score_run(folder: str) -> RunScore:
    """Analyze one cached run (`<folder>/run`, ground truth in `<folder>/truth.json`) with the
    pipeline call behind `tscope.analyze` (it also returns the normalized run, for the
    visibility measure)."""
    truth = json.loads((Path(folder) / "truth.json").read_text(encoding="utf-8"))
    return score_spec(RunSpec.from_json(truth["spec"]), folder)


def score_spec(spec: RunSpec, folder: str) -> RunScore:
    """`score_run` for a spec already read (bench/ood reads its own spec class)."""
    from tscope.pipeline import analyze_run

    started = time.monotonic()
    try:
        case, run = analyze_run(Path(folder) / "run")
    except Exception as error:  # scored as wrong, with the reason kept
        return RunScore(
            spec.name,
            spec.producer,
            spec.cause,
            spec.split,
            spec.planted_step,
            Headline("error", None, None, None, "logs", None),
            False,
            error=f"{type(error).__name__}: {error}"[:500] + traceback.format_exc()[-300:],
        )
    seconds = time.monotonic() - started
    headline = headline_of(case)
    if spec.cause == CONTROL:
        right = headline.status != "incident"
    else:
        right = headline.status == "incident" and causes.cause_is_right(
            spec, headline.category or "", headline.step, headline.source
        )
    visibility, largest = _visibility(spec, run)
    return RunScore(
        spec.name,
        spec.producer,
        spec.cause,
        spec.split,
        spec.planted_step,
        headline,
        right,
        _alerts(spec, case),
        analyze_seconds=round(seconds, 1),
        visibility=visibility,
        largest_excursion=largest,
        recorded=cause_recorded(spec, visibility),
    )


@dataclass(frozen=True)
class RealLogScore:
    path: str
    status: str
    alerts: list[tuple[str, str, int | None]]  # (category, severity, step)
    error: str = ""


def score_real_log(path: str) -> RealLogScore:
    import tscope

    try:
        case = tscope.analyze(Path(path), read_weights=False)
    except Exception as error:
        return RealLogScore(path, "error", [], f"{type(error).__name__}: {error}"[:300])
    alerts = [
        (f.category, f.severity, f.step) for f in case.findings if f.severity in ALERT_SEVERITIES
    ]
    return RealLogScore(path, case.summary.status, alerts)


def healthy_real_logs(realdata: Path) -> list[Path]:
    return sorted(p for pattern in HEALTHY_REAL_LOGS for p in realdata.glob(pattern))


def score_all(
    folders: list[Path], real_logs: list[Path], jobs: int
) -> tuple[list[RunScore], list[RealLogScore]]:
    with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
        runs = list(pool.map(score_run, [str(f) for f in folders]))
        real = list(pool.map(score_real_log, [str(p) for p in real_logs]))
    return runs, real


def to_json(runs: list[RunScore], real: list[RealLogScore]) -> dict[str, Any]:
    return {"runs": [asdict(r) for r in runs], "real_logs": [asdict(r) for r in real]}
