"""Findings from the replay's per-layer statistics (tscope.replay.stats):

- nonfinite_origin: the first module whose forward or backward produced NaN/Inf;
- attention_logit_growth: the largest pre-softmax attention logit crossed 1e3 (Wortsman et al.
  2023, "Small-scale proxies for large-scale Transformer training instabilities": quality degraded
  from about 1e3, runs above 1e4 diverged);
- output_logit_divergence: the output log-partition (log Z) moved by more than LOG_Z_DRIFT_NATS
  within the replay (PaLM's z-loss exists to hold it near 0; Wortsman et al. 2023 §3.2);
- activation_outlier: a block's largest activation jumped ≥ ACTIVATION_JUMP× above its own median
  over the replay;
- router_collapse: one expert receives ≥ ROUTER_COLLAPSE_FRACTION of a router's tokens.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from tscope.analyzers.replay.base import qualified
from tscope.analyzers.signals import fmt
from tscope.model import Finding
from tscope.model.categories import Category
from tscope.model.replay import ReplayResult, ReplayStep
from tscope.model.replay_statistics import (
    ACTIVATION_MAX_ABS,
    ATTENTION_LOGIT_MAX,
    EXPERT_TOKEN_FRACTION_MAX,
    LOG_Z_MEAN,
    NONFINITE_BACKWARD,
    NONFINITE_FORWARD,
)

ATTENTION_LOGIT_DEGRADED = 1e3
ATTENTION_LOGIT_DIVERGED = 1e4
# e^10 ≈ 22,000× in the partition function: healthy steps move log Z by well under a nat.
LOG_Z_DRIFT_NATS = 10.0
# A block output whose max |x| jumps 10× above its own median over the replay: an order of
# magnitude, beyond what a batch's content moves it (outlier features grow over thousands of
# steps, not within a replay window).
ACTIVATION_JUMP = 10.0
ROUTER_COLLAPSE_FRACTION = 0.9


def layer_findings(result: ReplayResult, qualified: bool) -> list[Finding]:
    steps = list(result.per_step)
    findings = _nonfinite_origin(steps)
    findings += _attention(steps)
    findings += _output_logits(steps)
    findings += _activations(steps)
    findings += _routers(steps)
    if qualified:
        return [_qualify(f) for f in findings]
    return findings


def _qualify(finding: Finding) -> Finding:
    from dataclasses import replace

    return replace(
        finding,
        severity="info",  # about the replayed run: a failed replay must not make an incident
        confidence=min(finding.confidence, 0.5),
        message=finding.message + " (The replay did not reproduce the log: read with care.)",
    )


def _series(steps: Sequence[ReplayStep], statistic: str) -> dict[str, list[tuple[int, float]]]:
    table: dict[str, list[tuple[int, float]]] = {}
    for step in steps:
        for layer, values in step.layers.items():
            value = values.get(statistic)
            if isinstance(value, (int, float)):
                table.setdefault(layer, []).append((step.step, float(value)))
    return table


def _nonfinite_origin(steps: Sequence[ReplayStep]) -> list[Finding]:
    for step in steps:
        forward = [name for name, v in step.layers.items() if v.get(NONFINITE_FORWARD)]
        backward = [name for name, v in step.layers.items() if v.get(NONFINITE_BACKWARD)]
        if not forward and not backward:
            continue
        phase, module = ("forward", forward[0]) if forward else ("backward", backward[0])
        return [
            Finding(
                category="nonfinite_origin",
                severity="critical",
                confidence=0.9,
                step=step.step,
                layer=module,
                message=(
                    f"The first NaN/Inf of the replay appeared at step {step.step} in the "
                    f"{phase} pass of {module}"
                    + (f" (backward: {backward[0]})" if forward and backward else "")
                    + "."
                ),
                evidence={
                    "phase": phase,
                    "module": module,
                    "forward": forward,
                    "backward": backward,
                },
                suggestion=(
                    f"Inspect {module}'s weights and inputs at step {step.step} (the checkpoint "
                    "before it and this step's batch); guard it with a norm, a lower learning "
                    "rate for it, or bf16/fp32 there."
                ),
                source="replay",
                threshold="first module whose output or gradient held NaN/Inf",
            )
        ]
    return []


def _attention(steps: Sequence[ReplayStep]) -> list[Finding]:
    worst = _worst(_series(steps, ATTENTION_LOGIT_MAX))
    if worst is None or worst[2] < ATTENTION_LOGIT_DEGRADED:
        return []
    layer, step, value = worst
    diverged = value >= ATTENTION_LOGIT_DIVERGED
    return [
        Finding(
            category="attention_logit_growth",
            severity="warning",
            confidence=0.8 if diverged else 0.6,
            step=step,
            layer=layer,
            message=(
                f"The largest attention logit reached {fmt(value)} in {layer} at step {step}: "
                + (
                    "the range where runs diverged (≥ 1e4)."
                    if diverged
                    else "the range where training quality degrades (≥ 1e3)."
                )
            ),
            evidence={ATTENTION_LOGIT_MAX: value, "layer": layer, "step": step},
            suggestion="Add QK-layernorm or a lower learning rate for attention (Wortsman et al. "
            "2023); check the softmax inputs in this layer.",
            source="replay",
            threshold="max q·k/√d ≥ 1e3 (degraded), ≥ 1e4 (diverged), Wortsman et al. 2023",
        )
    ]


def _output_logits(steps: Sequence[ReplayStep]) -> list[Finding]:
    findings = []
    for layer, points in _series(steps, LOG_Z_MEAN).items():
        finite = [(s, v) for s, v in points if math.isfinite(v)]
        if len(finite) < 2:
            continue
        start = finite[0][1]
        step, value = max(finite, key=lambda pair: abs(pair[1] - start))
        if abs(value - start) < LOG_Z_DRIFT_NATS:
            continue
        findings.append(
            Finding(
                category="output_logit_divergence",
                severity="warning",
                confidence=0.7,
                step=step,
                layer=layer,
                message=(
                    f"The output log-partition (mean log Z of {layer}) moved from {fmt(start)} to "
                    f"{fmt(value)} nats by step {step}: the output logits are diverging."
                ),
                evidence={"log_z_mean_start": start, LOG_Z_MEAN: value, "step": step},
                suggestion="Add a z-loss (PaLM: 1e-4 · log²Z) or lower the learning rate of the "
                "output head.",
                source="replay",
                threshold=f"|Δ mean log Z| ≥ {LOG_Z_DRIFT_NATS:g} nats within the replay",
            )
        )
    return findings[:1]


def _activations(steps: Sequence[ReplayStep]) -> list[Finding]:
    candidates = []
    for layer, points in _series(steps, ACTIVATION_MAX_ABS).items():
        values = np.array([v for _, v in points if math.isfinite(v)])
        if values.size < 3:
            continue
        median = float(np.median(values))
        step, value = max(points, key=lambda pair: pair[1] if math.isfinite(pair[1]) else -1.0)
        if median > 0 and value >= ACTIVATION_JUMP * median:
            candidates.append((value / median, layer, step, value, median))
    if not candidates:
        return []
    ratio, layer, step, value, median = max(candidates)
    return [
        Finding(
            category="activation_outlier",
            severity="warning",
            confidence=0.6,
            step=step,
            layer=layer,
            message=(
                f"{layer}'s largest activation jumped to {fmt(value)} at step {step}, "
                f"×{fmt(ratio)} its median over the replay ({fmt(median)})."
            ),
            evidence={ACTIVATION_MAX_ABS: value, "median": median, "ratio": ratio},
            suggestion="Look at this block's inputs at that step (the batch, the norm before it).",
            source="replay",
            threshold=f"block max |activation| ≥ {ACTIVATION_JUMP:g}× its replay median",
        )
    ]


def _routers(steps: Sequence[ReplayStep]) -> list[Finding]:
    worst = _worst(_series(steps, EXPERT_TOKEN_FRACTION_MAX))
    if worst is None or worst[2] < ROUTER_COLLAPSE_FRACTION:
        return []
    layer, step, value = worst
    return [
        Finding(
            category="router_collapse",
            severity="warning",
            confidence=0.7,
            step=step,
            layer=layer,
            message=(
                f"Router {layer} sent {value:.0%} of its tokens to one expert at step {step}: "
                "one expert has taken over."
            ),
            evidence={EXPERT_TOKEN_FRACTION_MAX: value, "router": layer, "step": step},
            suggestion="Check the load-balancing loss weight and the router's learning rate; "
            "look for a router with no gradient (frozen_parameters).",
            source="replay",
            threshold=f"busiest expert in ≥ {ROUTER_COLLAPSE_FRACTION:.0%} of tokens' top-k",
        )
    ]


def _worst(table: dict[str, list[tuple[int, float]]]) -> tuple[str, int, float] | None:
    best: tuple[str, int, float] | None = None
    for layer, points in table.items():
        for step, value in points:
            if math.isfinite(value) and (best is None or value > best[2]):
                best = (layer, step, value)
    return best


class LayerStatisticsExplainer:
    name = "layer_statistics"
    categories: tuple[str, ...] = (
        "nonfinite_origin",
        "attention_logit_growth",
        "output_logit_divergence",
        "activation_outlier",
        "router_collapse",
    )
    defines = (
        Category(
            "nonfinite_origin",
            "cause",
            "critical",
            "replay",
            "a NaN/Inf that started in one layer",
            "the first module whose output went non-finite in the replay",
        ),
        Category(
            "attention_logit_growth",
            "context",
            "warning",
            "replay",
            "attention logits growing",
            "max q·k/√d beyond the values of runs that stayed stable",
        ),
        Category(
            "output_logit_divergence",
            "context",
            "warning",
            "replay",
            "output logits drifting",
            "the mean log Z moved far within the replay",
        ),
        Category(
            "activation_outlier",
            "context",
            "warning",
            "replay",
            "an activation outlier",
            "a block's max |activation| far above its replay median",
        ),
        Category(
            "router_collapse",
            "context",
            "warning",
            "replay",
            "an MoE router collapsing onto one expert",
            "one expert takes most of a router's tokens",
        ),
    )

    def run(self, result: ReplayResult) -> list[Finding]:
        return layer_findings(result, qualified(result))
