"""cross_sequence_leak: gradient from one sequence's loss reaches another sequence's tokens."""

from __future__ import annotations

from tscope.analyzers.signals import fmt
from tscope.model import Finding
from tscope.model.categories import Category
from tscope.model.xray import XrayResult

CATEGORIES = (
    Category(
        "cross_sequence_leak",
        "context",
        "critical",
        "xray",
        "gradient leaking across sequences",
        "one sequence's loss reaches another's tokens",
    ),
)


def leak_findings(result: XrayResult) -> list[Finding]:
    matrix = result.leak_matrix
    pairs = [
        (s, t, value)
        for s, row in enumerate(matrix)
        for t, value in enumerate(row)
        if s != t and value > result.leak_threshold
    ]
    if not pairs:
        return []
    source, receiver, largest = max(pairs, key=lambda p: (p[2], -p[0], -p[1]))
    return [
        Finding(
            category="cross_sequence_leak",
            severity="warning",
            confidence=0.95,
            step=None,
            layer=None,
            message=(
                f"Gradient leaks between sequences: {len(pairs)} of "
                f"{len(matrix) * (len(matrix) - 1)} ordered pairs; the loss of sequence {source} "
                f"reaches sequence {receiver}'s tokens with {fmt(largest)}× the gradient on its "
                "own. Attention crosses the document boundaries of the batch."
            ),
            evidence={
                "pairs": len(pairs),
                "max_leak": largest,
                "from_sequence": source,
                "to_sequence": receiver,
                "leaking_pairs": [[s, t] for s, t, _ in pairs],
                "threshold": result.leak_threshold,
                "nan_forwards": result.nan_forwards,
            },
            suggestion=(
                "Give the model the boundaries: position_ids restarting at 0 for each packed "
                "sequence with use_cache=False (transformers detects packing from position_ids "
                "only when no cache is created; use_cache defaults to the config's True), or a "
                "block-diagonal 4D attention_mask, or flash-attention varlen kwargs "
                "(cu_seq_lens_q/k, max_length_q/k, e.g. DataCollatorWithFlattening)."
            ),
            source="xray",
            threshold=f"off-diagonal ‖∇‖ ratio > {result.leak_threshold:g} (exactly 0 when masked)",
        )
    ]
