"""update_ratio_high and layer_origin: which layers moved too far, and which moved first."""

from __future__ import annotations

import itertools

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
# One tensor alone: its factor must exceed the window's median factor this many times.
SINGLE_LAYER_FACTOR = 10.0
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
    # The LR in force over a window: the mean of its two checkpoints' LRs (one may be 0 at the
    # end of a decay; the mean is not).
    window_lr = {
        end: 0.5 * (rates[end] + rates[begin])
        for begin, end in itertools.pairwise(steps)
        if begin in rates and end in rates
    }
    normalized = len(window_lr) == len(steps) - 1 and all(lr > 0 for lr in window_lr.values())
    if normalized:
        rows["normalized_ratio"] = rows["update_ratio_per_step"] / rows["step"].map(window_lr)
    else:
        rows["normalized_ratio"] = rows["update_ratio_per_step"]
    rows["lr_normalized"] = normalized
    return rows


class UpdatesExplainer:
    name = "updates"
    categories: tuple[str, ...] = (
        "update_ratio_high",
        "layer_origin",
    )  # registered in tscope/model/categories.py

    def run(self, evidence: Evidence) -> list[Finding]:
        if evidence.checkpoints is None or evidence.checkpoints.layers.empty:
            return []
        # Biases start at zero and stay small, so their ratios to their own norm are noise.
        layers = evidence.checkpoints.layers
        layers = layers[~layers["tensor"].str.endswith("bias")]
        if layers.empty:
            return []
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
        if factor.empty:
            continue
        window_factor = float(factor.median())
        if window_factor >= UPDATE_RATIO_FACTOR:
            flagged = factor[factor >= UPDATE_RATIO_FACTOR]
            scope = f"most of the model ({len(flagged)} of {len(factor)} tensors)"
        else:
            # A single layer stands out only far beyond the spread between layers of a healthy
            # window (up to 3.1× the window's median in the stable fixture).
            flagged = factor[factor >= SINGLE_LAYER_FACTOR * max(window_factor, 1.0)]
            scope = f"{len(flagged)} tensor(s)"
        if flagged.empty:
            continue
        flagged = flagged.sort_values(ascending=False)
        start = int(windows.loc[windows["step"] == step, "window_start"].iloc[0])
        loss = primary_loss(evidence.run)
        inside = [s for s in spikes if start < s.onset_step <= int(step) and s.metric == loss]
        names = flagged.index[:MAX_NAMED].tolist()
        message = (
            f"Between checkpoints at steps {start} and {int(step)}, {scope} moved "
            f"×{fmt(window_factor)} more per step than in the other windows, for the learning "
            f"rate they held. Most: {names[0]} ×{fmt(float(flagged.iloc[0]))}; top: "
            f"{', '.join(names)}."
        )
        if inside:
            message += f" The loss spike at step {inside[0].peak_step} lies in this window."
        findings.append(
            Finding(
                category="update_ratio_high",
                severity="warning",
                confidence=0.8 if inside or window_factor >= UPDATE_RATIO_FACTOR else 0.55,
                step=int(step),
                layer=names[0],
                message=message,
                evidence={
                    "window": [start, int(step)],
                    "tensors": names,
                    "factor_vs_other_windows": [float(v) for v in flagged.iloc[:MAX_NAMED]],
                    "median_factor_all_tensors": window_factor,
                    "ratio_per_step_in_window": float(table.loc[names[0], step]),
                    "ratio_per_step_other_windows": float(others.loc[names[0]]),
                    "lr_normalized": bool(windows["lr_normalized"].iloc[0]),
                    # bf16 weight diffs overstate small updates (rounding); fp32 masters do not
                    "delta_source": ", ".join(
                        sorted(set(windows.loc[windows["step"] == step, "delta_source"].dropna()))
                    ),
                },
                suggestion=(
                    "Something raised the effective step size in this window: check the logged "
                    "learning rate, the scheduler state and gradient clipping between these "
                    "checkpoints; restart from the earlier one."
                ),
                source="checkpoints",
                spike_id=inside[0].id if inside else None,
                threshold=(
                    f"median over tensors of the update-to-weight ratio per step (÷ the "
                    f"checkpoints' LR) ≥ {UPDATE_RATIO_FACTOR}× the other windows, or one tensor "
                    f"≥ {SINGLE_LAYER_FACTOR}× the window's median"
                ),
            )
        )
    return findings


def _layer_origin(layers: pd.DataFrame, evidence: Evidence) -> Finding | None:
    """In the checkpoint window that contains the incident, the tensor that changed most
    relative to how much it changed in the window before (RMS or max |w|)."""
    incident_step = _first_incident_step(evidence, layers)
    if incident_step is None:
        return None
    steps = sorted(int(s) for s in layers["step"].unique())
    after = [s for s in steps if s >= incident_step]
    if not after or after[0] == steps[0]:
        return None
    end = after[0]
    start = steps[steps.index(end) - 1]
    earlier = steps[steps.index(start) - 1] if steps.index(start) > 0 else None
    change = _log_change(layers, start, end)
    baseline = _log_change(layers, earlier, start) if earlier is not None else None
    relative = (
        change - baseline.reindex(change.index).fillna(0.0) if baseline is not None else change
    )
    nonfinite = layers[(layers["step"] == end) & (layers["nonfinite_count"] > 0)]["tensor"]
    if not nonfinite.empty:
        origin = str(nonfinite.iloc[0])
        factor = float("inf")
    else:
        relative = relative.dropna()
        if relative.empty or relative.max() < np.log(DEVIATION_FACTOR):
            return None
        origin = str(relative.idxmax())
        factor = float(np.exp(relative.max()))
    deviating = relative[relative >= np.log(DEVIATION_FACTOR)].index.tolist()
    return Finding(
        category="layer_origin",
        severity="warning",
        confidence=0.55 if len(deviating) > 1 else 0.65,
        step=end,
        layer=origin,
        message=(
            f"Around the incident at step {incident_step}, {origin} changed most between the "
            f"checkpoints at steps {start} and {end} relative to its own previous change "
            f"(×{fmt(factor)}); {len(deviating)} tensor(s) deviated ≥ {DEVIATION_FACTOR}×."
        ),
        evidence={
            "window": [start, end],
            "incident_step": incident_step,
            "deviating_tensors": deviating[:MAX_NAMED],
            "deviation_factor": factor,
        },
        suggestion=(
            "Inspect this layer first (its inputs, normalization, learning rate); a replay of "
            "the steps in this window would pin the first step it moved."
        ),
        source="checkpoints",
        threshold=f"RMS or max |w| change ≥ {DEVIATION_FACTOR}× its change in the previous window",
    )


def _log_change(layers: pd.DataFrame, first: int, second: int) -> pd.Series:
    """Per tensor: the larger |log ratio| of RMS and of max |w| between two checkpoints."""
    a = layers[layers["step"] == first].set_index("tensor")
    b = layers[layers["step"] == second].set_index("tensor")
    changes = pd.DataFrame(
        {
            column: np.abs(
                np.log(b[column].astype(float) / a[column].astype(float).reindex(b.index))
            )
            for column in ("rms", "max_abs")
        },
        index=b.index,
    )
    result: pd.Series = changes.max(axis=1).replace([np.inf, -np.inf], np.nan)
    return result


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
