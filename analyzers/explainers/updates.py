"""update_ratio_high and layer_origin: which layers moved too far, and which moved first."""

from __future__ import annotations

import numpy as np
import pandas as pd
from tscope.analyzers.base import Evidence
from tscope.analyzers.signals import fmt, primary_loss

from tscope.model import Finding, Spike

# Adam's per-step update is about lr × (an RMS ≤ 1), so an update-to-weight ratio divided by the
# learning rate in force is comparable across checkpoint windows. A window whose LR-normalized
# ratio is 3× the median of the other windows moved far more than its schedule explains.
# (Healthy windows of the fixtures and the demo differ by ≤ 1.6×; see tests/test_checkpoint_explainers.)
UPDATE_RATIO_FACTOR = 3.0
# A window counts as a whole-model event when at least this share of tensors exceeds the factor.
WHOLE_MODEL_SHARE = 0.25
# layer_origin: a tensor "deviates" when its RMS or max |w| changes by 2× between checkpoints.
DEVIATION_FACTOR = 2.0
MAX_NAMED = 5


def _lr_by_step(evidence: Evidence) -> dict[int, float]:
    """The learning rate each checkpoint's optimizer state holds (its first param group)."""
    assert evidence.checkpoints is not None
    rates = {}
    for snapshot in evidence.checkpoints.snapshots:
        groups = snapshot.param_groups
        if (
            snapshot.info.step is not None
            and groups
            and isinstance(groups[0].get("lr"), (int, float))
        ):
            rates[snapshot.info.step] = float(groups[0]["lr"])
    return rates


def _windows(layers: pd.DataFrame, rates: dict[int, float]) -> pd.DataFrame:
    """One row per (window end, tensor) with the LR-normalized update ratio."""
    steps = sorted(layers["step"].unique().tolist())
    previous_step = dict(zip(steps[1:], steps[:-1], strict=False))
    rows = layers.dropna(subset=["update_ratio_per_step"]).copy()
    rows["window_start"] = rows["step"].map(previous_step)
    normalized = all(step in rates and rates[step] > 0 for step in steps)
    if normalized:
        lr = rows.apply(
            lambda r: 0.5 * (rates[int(r["step"])] + rates[int(r["window_start"])]), axis=1
        )
        rows["normalized_ratio"] = rows["update_ratio_per_step"] / lr
    else:
        rows["normalized_ratio"] = rows["update_ratio_per_step"]
    rows["lr_normalized"] = normalized
    return rows


class UpdatesExplainer:
    name = "updates"

    def run(self, evidence: Evidence) -> list[Finding]:
        if evidence.checkpoints is None or evidence.checkpoints.layers.empty:
            return []
        layers = evidence.checkpoints.layers
        windows = _windows(layers, _lr_by_step(evidence))
        findings = _update_ratio_high(windows, evidence.spikes, evidence)
        origin = _layer_origin(layers, evidence)
        if origin is not None:
            findings.append(origin)
        return findings


def _update_ratio_high(
    windows: pd.DataFrame, spikes: list[Spike], evidence: Evidence
) -> list[Finding]:
    if windows["step"].nunique() < 2:
        return []
    table = windows.pivot_table(index="tensor", columns="step", values="normalized_ratio")
    findings = []
    for step in table.columns:
        others = table.drop(columns=[step]).median(axis=1)
        factor = (table[step] / others).replace([np.inf, -np.inf], np.nan).dropna()
        flagged = factor[factor >= UPDATE_RATIO_FACTOR].sort_values(ascending=False)
        if flagged.empty:
            continue
        start = int(windows.loc[windows["step"] == step, "window_start"].iloc[0])
        share = len(flagged) / max(len(factor), 1)
        inside = [
            s
            for s in spikes
            if start < s.onset_step <= int(step) and s.metric == primary_loss(evidence.run)
        ]
        names = flagged.index[:MAX_NAMED].tolist()
        scope = "most of the model" if share >= WHOLE_MODEL_SHARE else f"{len(flagged)} tensor(s)"
        message = (
            f"Between checkpoints at steps {start} and {int(step)}, {scope} moved far more per step "
            f"than in the other windows (×{fmt(float(flagged.iloc[0]))} for {names[0]}); top: "
            f"{', '.join(names)}."
        )
        if inside:
            message += f" The loss spike at step {inside[0].peak_step} lies in this window."
        findings.append(
            Finding(
                category="update_ratio_high",
                severity="warning",
                confidence=0.8 if inside or share >= WHOLE_MODEL_SHARE else 0.6,
                step=int(step),
                layer=names[0],
                message=message,
                evidence={
                    "window": [start, int(step)],
                    "tensors": names,
                    "factor_vs_other_windows": [float(v) for v in flagged.iloc[:MAX_NAMED]],
                    "ratio_per_step_in_window": float(table.loc[names[0], step]),
                    "ratio_per_step_other_windows": float(others.loc[names[0]]),
                    "share_of_tensors": share,
                    "lr_normalized": bool(windows["lr_normalized"].iloc[0]),
                },
                suggestion=(
                    "Something raised the effective step size in this window: check the logged "
                    "learning rate, the scheduler state and gradient clipping between these "
                    "checkpoints; restart from the earlier one."
                ),
                source="checkpoints",
                spike_id=inside[0].id if inside else None,
                threshold=(
                    f"update-to-weight ratio per step (÷ the checkpoints' LR) ≥ {UPDATE_RATIO_FACTOR}× "
                    "the median of the other windows"
                ),
            )
        )
    return findings


def _layer_origin(layers: pd.DataFrame, evidence: Evidence) -> Finding | None:
    """The tensor whose RMS or max |w| first changed by DEVIATION_FACTOR between checkpoints."""
    incident_step = _first_incident_step(evidence, layers)
    if incident_step is None:
        return None
    ordered = layers.sort_values(["tensor", "step"])
    ratios = []
    for column in ("rms", "max_abs"):
        previous = ordered.groupby("tensor")[column].shift(1)
        change = np.abs(np.log(ordered[column].astype(float) / previous.astype(float)))
        ratios.append(change)
    deviation = pd.concat(ratios, axis=1).max(axis=1)
    candidates = ordered.assign(deviation=deviation)
    candidates = candidates[
        (candidates["deviation"] >= np.log(DEVIATION_FACTOR)) | (candidates["nonfinite_count"] > 0)
    ]
    candidates = candidates[candidates["step"] <= _first_checkpoint_after(layers, incident_step)]
    if candidates.empty:
        return None
    first_step = int(candidates["step"].min())
    at_first = candidates[candidates["step"] == first_step].sort_values(
        ["nonfinite_count", "deviation"], ascending=False
    )
    origin = at_first.iloc[0]
    return Finding(
        category="layer_origin",
        severity="warning",
        confidence=0.5 if len(at_first) > 1 else 0.65,
        step=first_step,
        layer=str(origin["tensor"]),
        message=(
            f"{origin['tensor']} deviated first: by the checkpoint at step {first_step} its "
            f"RMS/max |w| changed ×{fmt(float(np.exp(origin['deviation'])) if np.isfinite(origin['deviation']) else None)}"
            f" ({len(at_first)} tensor(s) deviated in that checkpoint) — the incident at step "
            f"{incident_step} started there or downstream of it."
        ),
        evidence={
            "checkpoint_step": first_step,
            "incident_step": incident_step,
            "deviating_tensors": at_first["tensor"].tolist()[:MAX_NAMED],
            "deviation_factor": float(np.exp(origin["deviation"]))
            if np.isfinite(origin["deviation"])
            else None,
        },
        suggestion=(
            "Inspect this layer first (its inputs, normalization, learning rate); a replay of "
            "the steps before the incident would pin the first step it moved."
        ),
        source="checkpoints",
        threshold=f"RMS or max |w| ×{DEVIATION_FACTOR} between consecutive checkpoints",
    )


def _first_incident_step(evidence: Evidence, layers: pd.DataFrame) -> int | None:
    loss = primary_loss(evidence.run)
    steps = [
        s.onset_step
        for s in evidence.spikes
        if s.metric == loss and (s.nonfinite or s.end_step is None or s.magnitude >= 6)
    ]
    nonfinite = layers[layers["nonfinite_count"] > 0]["step"]
    if not nonfinite.empty:
        steps.append(int(nonfinite.min()))
    return min(steps) if steps else None


def _first_checkpoint_after(layers: pd.DataFrame, step: int) -> int:
    after = sorted(s for s in layers["step"].unique().tolist() if s >= step)
    return int(after[0]) if after else int(layers["step"].max())
