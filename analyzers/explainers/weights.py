"""nonfinite_weights, weight_norm_growth, frozen_parameters: what the weights themselves say."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
from tscope.analyzers.base import Evidence
from tscope.analyzers.signals import fmt

from tscope.model import Finding

# Embeddings and the output head are where norm growth precedes spikes (Takase et al., "Spike No
# More", arXiv 2312.16903; OLMo 2 §3: no weight decay on embeddings).
EMBEDDING_OR_HEAD = re.compile(r"(wte|wpe|embed|lm_head|output|tok_embeddings)", re.IGNORECASE)
# A tensor whose L2 norm grows by half between two checkpoints is not drifting, it is running
# away: healthy weights change their norm by a few percent per checkpoint interval (measured on the
# fixture runs: ≤ 12% between checkpoints 60 steps apart).
NORM_GROWTH_FACTOR = 1.5
# Frozen: no change at all in any checkpoint window while at least this share of tensors moved.
FROZEN_MIN_MOVING_SHARE = 0.5
MAX_NAMED = 5  # tensors named in one message


def _layers(evidence: Evidence) -> pd.DataFrame | None:
    if evidence.checkpoints is None or evidence.checkpoints.layers.empty:
        return None
    return evidence.checkpoints.layers


class WeightsExplainer:
    name = "weights"
    categories: tuple[str, ...] = (
        "nonfinite_weights",
        "weight_norm_growth",
        "frozen_parameters",
    )  # registered in tscope/model/categories.py

    def run(self, evidence: Evidence) -> list[Finding]:
        layers = _layers(evidence)
        if layers is None:
            return []
        findings = []
        for check in (_nonfinite, _norm_growth, _frozen):
            finding = check(layers)
            if finding is not None:
                findings.append(finding)
        return findings


def _nonfinite(layers: pd.DataFrame) -> Finding | None:
    bad = layers[layers["nonfinite_count"] > 0]
    if bad.empty:
        return None
    first_step = int(bad["step"].min())
    first = bad[bad["step"] == first_step].sort_values("nonfinite_count", ascending=False)
    clean_before = layers[(layers["step"] < first_step)]["step"]
    last_clean = int(clean_before.max()) if not clean_before.empty else None
    worst = first.iloc[0]
    names = first["tensor"].tolist()
    return Finding(
        category="nonfinite_weights",
        severity="critical",
        confidence=0.99,
        step=first_step,
        layer=str(worst["tensor"]),
        message=(
            f"Checkpoint {worst['checkpoint']} (step {first_step}) holds NaN/Inf in {len(names)} "
            f"tensor(s), most in {worst['tensor']} ({int(worst['nonfinite_count'])} of "
            f"{int(worst['numel'])} values)"
            + (
                f"; the checkpoint at step {last_clean} was still finite."
                if last_clean is not None
                else "."
            )
        ),
        evidence={
            "checkpoint": str(worst["checkpoint"]),
            "tensors": names[:MAX_NAMED],
            "nonfinite_tensors": len(names),
            "nonfinite_values": int(first["nonfinite_count"].sum()),
            "last_finite_checkpoint_step": last_clean,
        },
        suggestion=(
            "Do not resume from this checkpoint; restart from the last finite one"
            + (f" (step {last_clean})" if last_clean is not None else "")
            + " with a lower learning rate or tighter clipping."
        ),
        source="checkpoints",
        threshold="any NaN/Inf value in a saved tensor",
    )


def _norm_growth(layers: pd.DataFrame) -> Finding | None:
    ordered = layers.sort_values(["tensor", "step"])
    previous = ordered.groupby("tensor")["l2_norm"].shift(1)
    growth = ordered["l2_norm"] / previous
    # Biases start at zero: their relative growth says nothing about a runaway.
    judged = (
        (growth >= NORM_GROWTH_FACTOR)
        & np.isfinite(growth)
        & ~ordered["tensor"].str.endswith("bias")
    )
    grown = ordered[judged].assign(growth=growth[judged])
    if grown.empty:
        return None
    grown = grown.sort_values("growth", ascending=False)
    top = grown.iloc[0]
    sensitive = grown[grown["tensor"].map(lambda name: bool(EMBEDDING_OR_HEAD.search(name)))]
    return Finding(
        category="weight_norm_growth",
        severity="warning",
        confidence=0.7 if not sensitive.empty else 0.55,
        step=int(top["step"]),
        layer=str(top["tensor"]),
        message=(
            f"{len(grown['tensor'].unique())} tensor(s) grew their L2 norm by ≥ "
            f"{NORM_GROWTH_FACTOR}× between two checkpoints; most: {top['tensor']} ×{fmt(float(top['growth']))} "
            f"by step {int(top['step'])}"
            + (
                f" (embeddings/head among them: {', '.join(sensitive['tensor'].unique()[:3])})."
                if not sensitive.empty
                else "."
            )
        ),
        evidence={
            "tensors": grown["tensor"].unique()[:MAX_NAMED].tolist(),
            "max_growth": float(top["growth"]),
            "step": int(top["step"]),
            "embedding_or_head": sensitive["tensor"].unique()[:MAX_NAMED].tolist(),
        },
        suggestion=(
            "Weight norms running away precede spikes (Spike No More; OLMo 2): check weight decay "
            "on these tensors, the learning rate in that window, and consider embedding LayerNorm "
            "or scaled embeddings."
        ),
        source="checkpoints",
        threshold=f"‖W‖ ×{NORM_GROWTH_FACTOR} or more between consecutive checkpoints",
    )


def _frozen(layers: pd.DataFrame) -> Finding | None:
    deltas = layers.dropna(subset=["delta_norm"])
    if deltas.empty:
        return None
    per_tensor = deltas.groupby("tensor")["delta_norm"].max()
    moving_share = float((per_tensor > 0).mean())
    frozen = per_tensor[per_tensor == 0].index.tolist()
    if not frozen or moving_share < FROZEN_MIN_MOVING_SHARE:
        return None
    steps = sorted(deltas["step"].unique().tolist())
    return Finding(
        category="frozen_parameters",
        severity="warning",
        confidence=0.8,
        step=int(steps[-1]),
        layer=frozen[0],
        message=(
            f"{len(frozen)} tensor(s) never changed across {len(steps)} checkpoint window(s) while "
            f"{moving_share:.0%} of tensors trained: {', '.join(frozen[:MAX_NAMED])}."
        ),
        evidence={
            "frozen_tensors": frozen[:20],
            "moving_share": moving_share,
            "windows": len(steps),
        },
        suggestion=(
            "If these should train, they get no gradient (a router whose output is detached, a "
            "norm configured but never applied, requires_grad=False by mistake); if they are "
            "intentionally frozen, nothing to do."
        ),
        source="checkpoints",
        threshold="‖ΔW‖ = 0 in every window while most tensors moved",
    )
