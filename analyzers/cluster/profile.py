"""One run as the cluster analysis sees it: stable or unstable, when it blew up, what warned first.

Built from the run's case (findings, spikes, change points: what `tscope analyze` concluded) and its
training loss at full resolution, so a profile can be rebuilt from a cached case.json.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from tscope.analyzers.baseline import difference_sigma, rolling_median, shifted_by_one
from tscope.analyzers.cluster.aligned import loss_zscores
from tscope.model.case import Case, Finding
from tscope.model.categories import ALERT_SEVERITIES
from tscope.model.cluster import LossCurve, RunProfile, Signal
from tscope.model.metric_names import GRAD_NORM, LOSS, is_loss_like

# The run's own early baseline: the median of its first logged losses (the start of training,
# before the model has learned much). Five points are robust to one odd first batch.
BASELINE_POINTS = 5
MIN_BASELINE_POINTS = 3
# A run blew up when its loss stays at or above twice its level before the event: the median of
# the LEVEL_POINTS finite points before the stretch starts (issue 11: against the run's first
# points, ≈ ln V for pretraining, a resume that lost the weights — 2.2 → 11.1 — never crossed).
# The early baseline above still catches a run that blows up before it has a level.
EXPLOSION_FACTOR = 2.0
LEVEL_POINTS = 50
MIN_LEVEL_POINTS = 10
# "Stays": this many consecutive logged points above the line. One point above it is a spike
# (it appears among the signals), not a blow-up; small-batch runs (DPO, LoRA on batch 2) log
# single points far above their median.
EXPLOSION_MIN_POINTS = 2
# ... and clear the level by this many σ of the loss's step-to-step noise before it: a loss near
# zero (an MLP at 0.02 with noise of 0.03, logged to MLflow) doubles its level at every other
# pair of points. An LM loss's doubling is hundreds of σ. The first MAX_NOISE_CHECKS candidates
# are checked (a noisy near-zero run has many).
EXPLOSION_NOISE_SIGMAS = 3.0
MAX_NOISE_CHECKS = 10_000
# Findings that say on their own that the run derailed (the single-run analysis's verdict).
DERAILED_CATEGORIES = ("loss_divergence", "nan_loss")
# Run-long conditions (a plateau from step 1, a persistently high gradient norm) describe the
# whole run, not a warning sign at a step before an explosion: not used as signals.
# A blown-up run "recovered" when its last logged points are finite and their median is back
# within 15% of its best loss before the explosion (the divergence explainer's "elevated" line).
RECOVERY_TAIL_POINTS = 5
RECOVERY_RATIO = 1.15


def profile_run(
    name: str,
    path: str,
    case: Case,
    loss: LossCurve,
    case_path: str = "",
    reused_case: bool = False,
    extra_config: dict[str, Any] | None = None,
) -> RunProfile:
    """`case` is the run's case as case.json holds it (read back with Case.from_dict); `loss` the
    training loss with hidden NaNs restored."""
    baseline = early_baseline(loss.values)
    candidates = explosion_candidates(loss, baseline, case.findings)
    explosion_step, explosion_kind = min(candidates) if candidates else (None, None)
    finite = loss.values[np.isfinite(loss.values)]
    config = flatten_config(case.run.config)
    config.update(extra_config or {})
    return RunProfile(
        name=name,
        path=path,
        status="stable" if explosion_step is None else "unstable",
        loss=loss,
        baseline_loss=baseline,
        explosion_step=explosion_step,
        explosion_kind=explosion_kind,
        failure_mode=failure_mode(loss, explosion_step, {kind for _, kind in candidates}),
        final_loss=float(finite[-1]) if finite.size else None,
        signals=tuple(signals_of(case)),
        config=config,
        verdict=case.summary.verdict,
        case_status=case.summary.status,
        case_path=case_path,
        reused_case=reused_case,
        unread_files=len(case.partial),
        # Where the run was just analyzed (numba loaded, its baseline code warm); a reused case's
        # worker would import numba for it alone (0.65 s CPU): the report computes those.
        loss_zscores=None if reused_case else loss_zscores(loss, explosion_step),
    )


def early_baseline(values: np.ndarray) -> float | None:
    finite = values[np.isfinite(values)][:BASELINE_POINTS]
    if finite.size < MIN_BASELINE_POINTS:
        return None
    return float(np.median(finite))


def explosion_candidates(
    loss: LossCurve, baseline: float | None, findings: list[Finding]
) -> list[tuple[int, str]]:
    """(first step, kind) of each way the run shows a blow-up; empty for a stable run."""
    candidates: list[tuple[int, str]] = []
    nonfinite = np.flatnonzero(~np.isfinite(loss.values))
    if nonfinite.size:
        candidates.append((int(loss.steps[nonfinite[0]]), "nonfinite"))
    if baseline is not None and baseline > 0:
        above = np.isfinite(loss.values) & (loss.values >= EXPLOSION_FACTOR * baseline)
        start = _first_run(above, EXPLOSION_MIN_POINTS)
        if start is not None:
            candidates.append((int(loss.steps[start]), "above_baseline"))
    start = first_above_level(loss.values)
    if start is not None:
        candidates.append((int(loss.steps[start]), "above_level"))
    for finding in findings:
        if (
            finding.category in DERAILED_CATEGORIES
            and finding.severity == "critical"
            and finding.step is not None
        ):
            candidates.append((finding.step, "divergence"))
    return candidates


def first_above_level(values: np.ndarray) -> int | None:
    """First index where EXPLOSION_MIN_POINTS consecutive points are all ≥ EXPLOSION_FACTOR × the
    median of the LEVEL_POINTS finite points before it (the level before the event)."""
    finite = np.where(np.isfinite(values), values, np.nan)
    # pandas' rolling median shifted by one, computed without pandas (0.7 ms instead of 1.5 ms
    # over 10,000 points, plus the Series' overhead: ~3 ms of a cluster run's ~50 ms).
    level = shifted_by_one(rolling_median(finite, LEVEL_POINTS, MIN_LEVEL_POINTS))
    # the smallest of the next EXPLOSION_MIN_POINTS values (NaN where one is missing)
    ahead = np.full(finite.size, np.nan)
    if finite.size >= EXPLOSION_MIN_POINTS:
        ahead[: finite.size - EXPLOSION_MIN_POINTS + 1] = np.lib.stride_tricks.sliding_window_view(
            finite, EXPLOSION_MIN_POINTS
        ).min(axis=1)
    with np.errstate(invalid="ignore"):
        hits = np.flatnonzero((level > 0) & (ahead >= EXPLOSION_FACTOR * level))
    for index in hits[:MAX_NOISE_CHECKS]:
        noise = difference_sigma(finite[max(0, index - LEVEL_POINTS) : index])
        if not np.isfinite(noise) or ahead[index] >= level[index] + EXPLOSION_NOISE_SIGMAS * noise:
            return int(index)
    return None


def failure_mode(loss: LossCurve, explosion_step: int | None, kinds: set[str]) -> str | None:
    """How the run failed, as a whole: `blowup` (the loss exploded or went non-finite and did not
    come back), `recovered` (its last points are finite and back near its best level before the
    explosion), `divergence` (only the single-run analysis's critical divergence: a slower rise)."""
    if not kinds or explosion_step is None:
        return None
    if not kinds & {"nonfinite", "above_baseline", "above_level"}:
        return "divergence"
    before = loss.values[(loss.steps < explosion_step) & np.isfinite(loss.values)]
    tail = loss.values[-RECOVERY_TAIL_POINTS:]
    if before.size == 0 or tail.size < RECOVERY_TAIL_POINTS or not np.isfinite(tail).all():
        return "blowup"
    back = float(np.median(tail)) <= RECOVERY_RATIO * float(before.min())
    return "recovered" if back else "blowup"


def _first_run(mask: np.ndarray, length: int) -> int | None:
    """Index where the first stretch of `length` consecutive True values starts."""
    if mask.size < length:
        return None
    window_sums = np.convolve(mask.astype(np.int64), np.ones(length, dtype=np.int64), "valid")
    hits = np.flatnonzero(window_sums == length)
    return int(hits[0]) if hits.size else None


def signals_of(case: Case) -> list[Signal]:
    """Every warning the run gave, first occurrence of each kind, in step order.

    Findings at warning or critical severity keep their category; the detectors' first alarms are
    added because they usually fire before a finding's peak step: the onset of the first spike on
    the gradient norm (`grad_norm_alarm`) and on the loss (`loss_alarm`), and the first upward
    CUSUM regime change of the loss (`loss_cusum_alarm`).
    """
    # Imported here: the category table reads this package's own category (cluster/__init__.py).
    from tscope.analyzers.categories import STANDALONE

    first: dict[str, Signal] = {}

    def add(signal: Signal) -> None:
        known = first.get(signal.kind)
        if known is None or signal.step < known.step:
            first[signal.kind] = signal

    for finding in case.findings:
        if (
            finding.severity in ALERT_SEVERITIES
            and finding.step is not None
            and finding.category not in STANDALONE
        ):
            add(Signal(finding.category, finding.step, finding.severity, finding.message))
    for spike in case.spikes:
        metric = spike.metric
        kind = (
            "grad_norm_alarm"
            if metric == GRAD_NORM
            else "loss_alarm"
            if metric == LOSS or (is_loss_like(metric) and not metric.startswith("eval"))
            else None
        )
        if kind is not None:
            add(
                Signal(
                    kind,
                    spike.onset_step,
                    "warning",
                    f"{metric} alarm ({', '.join(spike.detectors)}) at step "
                    f"{spike.onset_step}, peak at {spike.peak_step}",
                )
            )
    for change in case.change_points:
        before, after = change.before_mean, change.after_mean
        if (
            change.metric == LOSS
            and change.detector == "cusum"
            and math.isfinite(before)  # case.json writes a non-finite mean as a string: no level
            and math.isfinite(after)
            and after > before
        ):
            add(
                Signal(
                    "loss_cusum_alarm",
                    change.step,
                    "warning",
                    f"CUSUM: the loss level rose from {before:.3g} to {after:.3g}",
                )
            )
    return sorted(first.values(), key=lambda s: (s.step, s.kind))


def flatten_config(config: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Nested config → `field: value` with dotted names; lists become their JSON-ish text."""
    flat: dict[str, Any] = {}
    for key, value in config.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            flat.update(flatten_config(value, f"{name}."))
        elif isinstance(value, (list, tuple)):
            flat[name] = str(list(value))
        else:
            flat[name] = value
    return flat
