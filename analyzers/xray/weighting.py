"""token_weighting_mismatch: the gradient weight the step gives its target tokens is not the
intended rule (or the step trains tokens it should not, or changes the per-token loss itself)."""

from __future__ import annotations

from tscope.analyzers.signals import fmt
from tscope.analyzers.xray.rules import RULE_MATCH_TOLERANCE, matching_rules
from tscope.model import Finding
from tscope.model.categories import Category
from tscope.model.xray import XrayResult

CATEGORIES = (
    Category(
        "token_weighting_mismatch",
        "context",
        "warning",
        "xray",
        "tokens weighted unlike the intended rule",
        "a token's gradient weight differs from the intended rule",
    ),
)

# cos(g, r) below 1 − this: the step changed a token's loss, not only its weight. Float32
# rescaled gradients keep cos within ~1e-7 of 1 (measured); label smoothing 0.1 moves it ~1e-2.
COSINE_TOLERANCE = 1e-4
# Gradient on a sequence's last token (which predicts nothing of its own sequence) above this
# share of a typical target row's: the step trains a target across a sequence boundary.
BOUNDARY_TOLERANCE = 1e-6
_FIXES = {
    "micro_batch_mean": (
        "Normalise once per optimizer step: sum the token losses of every micro-batch and divide "
        "by the step's total target count (Trainer: a model whose forward accepts "
        "num_items_in_batch, or compute_loss_func; a custom loop: loss = loss_sum / "
        "tokens_in_step), not each micro-batch's mean divided by gradient_accumulation_steps."
    ),
    "sum_of_micro_batch_means": (
        "Divide each micro-batch's loss by the step's total target count (or at least by "
        "gradient_accumulation_steps) before backward: the micro-batch means are summed."
    ),
    "per_rank_mean": (
        "Set average_tokens_across_devices=True (Trainer), or all-reduce the step's target count "
        "and divide every rank's token-loss sum by it: each rank now averages its own tokens and "
        "the all-reduce averages the ranks."
    ),
    "sequence_mean": (
        "Average over tokens, not sequences: divide the summed token losses by the target count "
        "(a per-sequence mean gives a short sequence's tokens more weight)."
    ),
    "token_mean": 'Set intended = "token_mean" in the entry if this is what the run wants.',
    "sum": "Divide the summed token losses by the step's target count (reduction='mean').",
}


def weighting_findings(result: XrayResult) -> list[Finding]:
    findings: list[Finding] = []
    intended = result.fit(result.intended)
    if intended is not None and result.tokens:
        low = min(t.cosine for t in result.tokens)
        if low < 1 - COSINE_TOLERANCE:
            # The loss itself changed: ⟨g, r⟩/‖r‖² is then only approximately a weight.
            findings.append(_direction(result, low))
        elif intended.max_deviation > RULE_MATCH_TOLERANCE:
            findings.append(_mismatch(result, intended.max_deviation))
    if result.boundary_weight > BOUNDARY_TOLERANCE:
        findings.append(_boundary(result))
    return findings


def _weights(result: XrayResult) -> tuple[float, float]:
    weights = [t.weight for t in result.tokens]
    return min(weights), max(weights)


def _mismatch(result: XrayResult, deviation: float) -> Finding:
    low, high = _weights(result)
    matched = matching_rules(result.fits)
    best = result.best_fit()
    uniform = low > 0 and high / low - 1 <= RULE_MATCH_TOLERANCE
    rule = matched[0] if matched else None
    if uniform:
        severity, confidence = "info", 0.9
        what = (
            f"The step scales every target token alike, by {fmt(low)}× a token mean "
            f"(rule {rule or 'none of the closed forms'}); the intended {result.intended} differs "
            "only by that constant, which Adam largely absorbs (it still moves clipping and the "
            "effective epsilon)."
        )
    else:
        severity, confidence = "warning", 0.95
        matches = (
            f"they match the {' / '.join(matched)} rule (max deviation "
            f"{fmt(best.max_deviation if best else 0.0)})"
            if matched
            else f"no closed-form rule matches (nearest: {best.rule if best else 'none'}, max "
            f"deviation {fmt(best.max_deviation if best else 0.0)})"
        )
        what = (
            f"The step weights its target tokens from {fmt(low)} to {fmt(high)} times a token "
            f"mean ({fmt(high / low if low > 0 else float('inf'))}× apart) instead of the "
            f"intended {result.intended}; {matches}."
        )
    seq_weights: dict[int, float] = {}
    for token in result.tokens:
        seq_weights.setdefault(token.sequence, token.weight)
    return Finding(
        category="token_weighting_mismatch",
        severity=severity,
        confidence=confidence,
        step=None,
        layer=None,
        message=what,
        evidence={
            "intended": result.intended,
            "matched_rules": matched,
            "nearest_rule": best.rule if best else None,
            "nearest_max_deviation": best.max_deviation if best else None,
            "intended_max_deviation": deviation,
            "weight_min": low,
            "weight_max": high,
            "first_weight_per_sequence": [seq_weights[s] for s in sorted(seq_weights)],
            "lengths": list(result.lengths),
            "forward_calls": result.forward_calls,
            "world_size": result.world_size,
            "min_cosine": min(t.cosine for t in result.tokens),
        },
        suggestion=_FIXES.get(rule or (best.rule if best else ""), _FIXES["sum"])
        if not uniform
        else _FIXES.get(rule or "sum", _FIXES["sum"]),
        source="xray",
        threshold=f"any token's weight more than {RULE_MATCH_TOLERANCE:g} (relative) from the "
        "intended rule's closed form",
    )


def _direction(result: XrayResult, low: float) -> Finding:
    intended = result.fit(result.intended)
    deviation = intended.max_deviation if intended is not None else 0.0
    best = result.best_fit()
    label_smoothing = result.settings.get("label_smoothing_factor")
    hint = (
        f" (label_smoothing_factor={label_smoothing})"
        if isinstance(label_smoothing, (int, float)) and label_smoothing
        else ""
    )
    return Finding(
        category="token_weighting_mismatch",
        severity="info",
        confidence=0.9,
        step=None,
        layer=None,
        message=(
            "The per-token gradient is not a rescaled cross-entropy gradient: min cos(g, r) = "
            f"{low:.6f}{hint}. The loss itself is changed (label smoothing, z-loss, an extra "
            f"term); against the intended {result.intended} the projected weights deviate by "
            f"up to {fmt(deviation)}, an approximation while the direction differs."
        ),
        evidence={
            "min_cosine": low,
            "intended": result.intended,
            "intended_max_deviation": deviation,
            "nearest_rule": best.rule if best else None,
            **({"label_smoothing_factor": label_smoothing} if hint else {}),
        },
        suggestion=(
            "If the change is not intended, remove it: label_smoothing_factor=0 (Trainer), or the "
            "extra term in the loss."
        ),
        source="xray",
        threshold=f"cos(g, r) < 1 − {COSINE_TOLERANCE:g}",
    )


def _boundary(result: XrayResult) -> Finding:
    return Finding(
        category="token_weighting_mismatch",
        severity="warning",
        confidence=0.95,
        step=None,
        layer=None,
        message=(
            "The step trains the last token of a sequence to predict a token outside it (the next "
            "packed sequence's first token): its gradient is "
            f"{fmt(result.boundary_weight)}× a typical target token's."
        ),
        evidence={"boundary_weight": result.boundary_weight, "lengths": list(result.lengths)},
        suggestion=(
            "Set the label of each packed sequence's first token to -100 (as "
            "DataCollatorWithFlattening does), so no target crosses a document boundary."
        ),
        source="xray",
        threshold=f"last-token gradient > {BOUNDARY_TOLERANCE:g} × the median target row's",
    )
