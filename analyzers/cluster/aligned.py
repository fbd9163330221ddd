"""Loss spikes at the same step in several runs: evidence about the data, not the settings.

Runs that read the same batches in the same order and spike at the same step were hit by the same
batch (modded-nanogpt's records all bump at steps 305, 327, 337, 946…). The test:

1. per run, an alarm where the loss rises `ALIGNED_Z` robust sigmas above its trailing median
   (the single-run baseline of `tscope.analyzers.baseline`), only before the run blew up;
2. per step, how many runs have an alarm within ±`ALIGNMENT_TOLERANCE_STEPS`;
3. under independence each run alarms near a given step with its own rate, so the count is
   approximately Poisson with mean Σ rates; a step is aligned when the chance of that many
   coincident alarms is below `ALIGNED_ALPHA` divided by the number of steps tested (Bonferroni).

The per-run threshold is only a screen, far below a single run's 6σ: the coincidence across runs
carries the evidence (a 3σ bump that ten runs share at one step is not noise), and the Bonferroni
-corrected tail keeps chance coincidences out however low the screen is, at the cost of power.
3σ is the conventional screening level: rare enough per run (about 1–3% of the steps of a real
small-batch loss curve) that chance alignments across several runs stay improbable.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from tscope.analyzers.baseline import robust_baseline
from tscope.model.cluster import AlignedSpike, LossCurve, RunProfile

ALIGNED_Z = 3.0
# Logging and data-loader off-by-ones (step 946 in one record, 947 in another) still align.
ALIGNMENT_TOLERANCE_STEPS = 1
ALIGNED_ALPHA = 0.01
MIN_ALIGNED_RUNS = 2
# Config fields that decide which batch a run reads at a step; the first one all runs log decides.
DATA_ORDER_FIELDS = ("data_seed", "seed")
DATASET_FIELDS = ("dataset", "dataset_name", "train_file", "data_path", "data_dir", "dataset_path")


def aligned_spikes(profiles: Sequence[RunProfile]) -> list[AlignedSpike]:
    runs = [run for run in map(_alarms, profiles) if run is not None]
    if len(runs) < MIN_ALIGNED_RUNS:
        return []
    tolerance = ALIGNMENT_TOLERANCE_STEPS
    # (run index, step) pairs after widening each alarm by ±tolerance, one pair per run and step.
    pairs = np.unique(
        np.concatenate(
            [
                np.stack(
                    [
                        np.full(run.alarm_steps.size * (2 * tolerance + 1), index),
                        (run.alarm_steps[:, None] + np.arange(-tolerance, tolerance + 1)).ravel(),
                    ],
                    axis=1,
                )
                for index, run in enumerate(runs)
                if run.alarm_steps.size
            ]
            or [np.empty((0, 2), dtype=np.int64)]
        ),
        axis=0,
    )
    if pairs.size == 0:
        return []
    candidate_steps, counts = np.unique(pairs[:, 1], return_counts=True)
    expected = _expected_counts(runs, candidate_steps)
    span = max(run.last_step for run in runs) - min(run.first_step for run in runs) + 1
    from scipy.stats import poisson  # heavy: only when there are alarms to test

    p_values = poisson.sf(counts - 1, np.maximum(expected, 1e-12))
    flagged = (counts >= MIN_ALIGNED_RUNS) & (p_values < ALIGNED_ALPHA / max(span, 1))
    events = []
    for first, last in _stretches(candidate_steps[flagged], tolerance):
        inside = (candidate_steps >= first) & (candidate_steps <= last)
        event = _event(
            profiles_by_index=runs,
            first=first,
            last=last,
            p_value=float(p_values[inside & flagged].min()),
        )
        if event is not None:
            events.append(event)
    return events


class _RunAlarms:
    def __init__(self, profile: RunProfile, steps: np.ndarray, z: np.ndarray) -> None:
        self.profile = profile
        self.steps = steps
        self.z = z
        alarm = np.nan_to_num(z, nan=0.0, posinf=0.0, neginf=0.0) >= ALIGNED_Z
        self.alarm_steps = steps[alarm]
        self.first_step = int(steps[0])
        self.last_step = int(steps[-1])
        # Chance that this run has an alarm within ±tolerance of a given step.
        widened = self.alarm_steps.size * (2 * ALIGNMENT_TOLERANCE_STEPS + 1)
        self.rate = min(1.0, widened / max(self.last_step - self.first_step + 1, 1))


def loss_zscores(loss: LossCurve, explosion_step: int | None) -> tuple[np.ndarray, np.ndarray]:
    """(steps, z) of the loss before the explosion, z against the run's robust trailing baseline
    (no z for fewer than two points: such a run is not screened)."""
    steps, values = loss.steps, loss.values
    if explosion_step is not None:
        keep = steps < explosion_step
        steps, values = steps[keep], values[keep]
    if steps.size < 2:
        return steps, np.empty(0)
    return steps, robust_baseline(values).zscores(values)


def _alarms(profile: RunProfile) -> _RunAlarms | None:
    known = profile.loss_zscores
    steps, z = known if known is not None else loss_zscores(profile.loss, profile.explosion_step)
    if steps.size < 2:
        return None
    return _RunAlarms(profile, steps, z)


def _expected_counts(runs: Sequence[_RunAlarms], steps: np.ndarray) -> np.ndarray:
    """Σ rate over the runs that logged each step (a sweep over start and end events)."""
    starts = np.array([run.first_step for run in runs])
    ends = np.array([run.last_step for run in runs]) + 1
    rates = np.array([run.rate for run in runs])
    order_start, order_end = np.argsort(starts), np.argsort(ends)
    begun = np.concatenate([[0.0], np.cumsum(rates[order_start])])
    ended = np.concatenate([[0.0], np.cumsum(rates[order_end])])
    total: np.ndarray = (
        begun[np.searchsorted(starts[order_start], steps, side="right")]
        - ended[np.searchsorted(ends[order_end], steps, side="right")]
    )
    return total


def _stretches(steps: np.ndarray, gap: int) -> list[tuple[int, int]]:
    if steps.size == 0:
        return []
    breaks = np.flatnonzero(np.diff(steps) > gap + 1)
    starts = np.concatenate([[0], breaks + 1])
    ends = np.concatenate([breaks, [steps.size - 1]])
    return [(int(steps[a]), int(steps[b])) for a, b in zip(starts, ends, strict=True)]


def _event(
    profiles_by_index: Sequence[_RunAlarms], first: int, last: int, p_value: float
) -> AlignedSpike | None:
    tolerance = ALIGNMENT_TOLERANCE_STEPS
    names, peaks, compared = [], [], 0
    for run in profiles_by_index:
        if run.first_step > last or run.last_step < first:
            continue
        compared += 1
        near = (run.steps >= first - tolerance) & (run.steps <= last + tolerance)
        hits = near & (np.nan_to_num(run.z, nan=0.0, posinf=0.0, neginf=0.0) >= ALIGNED_Z)
        if hits.any():
            index = np.flatnonzero(hits)[int(np.argmax(run.z[hits]))]
            names.append(run.profile.name)
            peaks.append(int(run.steps[index]))
    if len(names) < MIN_ALIGNED_RUNS:
        return None
    members = [run.profile for run in profiles_by_index if run.profile.name in set(names)]
    shared, evidence = shared_data_order(members)
    return AlignedSpike(
        first_step=min(peaks),
        last_step=max(peaks),
        runs=tuple(names),
        peak_steps=tuple(peaks),
        runs_compared=compared,
        p_value=p_value,
        shared_data_order=shared,
        data_order_evidence=evidence,
    )


def shared_data_order(profiles: Sequence[RunProfile]) -> tuple[str, str]:
    """("yes" | "no" | "unknown", why) from the runs' configs."""
    for name in DATASET_FIELDS:
        datasets = {_text(p.config.get(name)) for p in profiles if p.config.get(name) is not None}
        if len(datasets) > 1:
            return "no", f"the runs read different data ({name}: {', '.join(sorted(datasets))})"
    for name in DATA_ORDER_FIELDS:
        values = [p.config.get(name) for p in profiles]
        if all(v is not None for v in values):
            distinct = sorted({_text(v) for v in values})
            if len(distinct) == 1:
                return "yes", f"every run has {name}={distinct[0]}"
            return "no", f"the runs use different {name} values ({', '.join(distinct)})"
    return "unknown", "the logs do not record the data order (no data_seed or seed)"


def _text(value: Any) -> str:
    return str(value)
