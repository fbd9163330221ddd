"""The case's `xray` section turned into what the templates print.

view["xray"] = xray_view(case.xray)   # None when the case has no token audit: nothing renders
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from tscope.model.xray_section import XraySection, XrayToken
from tscope.render.formatting import format_number, optional_float
from tscope.render.xray_svg import leak_matrix, weight_strips

RULE_WORDS = {
    "token_mean": "token mean over the whole step",
    "sequence_mean": "mean over sequences of each sequence's token mean",
    "sum": "sum of token losses",
    "micro_batch_mean": "mean of micro-batch means",
    "sum_of_micro_batch_means": "sum of micro-batch means",
    "per_rank_mean": "mean over ranks of each rank's token mean",
}
MAX_MATRIX_SEQUENCES = 64  # larger probes keep the matrix in xray.json only


def xray_view(section: XraySection | None) -> dict[str, Any] | None:
    if section is None:
        return None
    by_sequence: dict[int, list[XrayToken]] = {}
    for token in section.tokens:
        by_sequence.setdefault(token.sequence, []).append(token)
    strips = []
    rows = []
    for sequence, items in sorted(by_sequence.items()):
        items.sort(key=lambda t: t.position)
        cells = [
            (
                optional_float(t.weight),
                f"sequence {sequence}, token {format_number(t.position)}: weight "
                f"{format_number(t.weight)}, cos {format_number(t.cosine)}, "
                f"micro-batch {format_number(t.micro_batch)}, rank "
                f"{format_number(t.rank)}",
            )
            for t in items
        ]
        strips.append((f"seq {sequence} ({len(items)})", cells))
        weights = [optional_float(t.weight) for t in items]
        finite = [w for w in weights if w is not None]
        rows.append(
            {
                "sequence": str(sequence),
                "targets": str(len(items)),
                "weights": ", ".join(format_number(w) for w in weights),
                "mean": format_number(sum(finite) / len(finite)) if finite else "—",
            }
        )
    matrix = [[optional_float(v) for v in row] for row in section.leak_matrix]
    labels = [f"seq {i}" for i in range(len(matrix))]
    intended = section.intended or "token_mean"
    matched = section.matched_rule or ""
    return {
        "mode": section.mode,
        "source": section.source,
        "intended": intended,
        "intended_words": RULE_WORDS.get(intended, intended),
        "matched": matched,
        "matched_words": RULE_WORDS.get(matched, matched),
        "matched_rules": ", ".join(section.matched_rules),
        "matched_deviation": format_number(section.matched_max_deviation),
        "intended_deviation": format_number(section.intended_max_deviation),
        "min_cosine": format_number(section.min_cosine),
        "boundary_weight": format_number(section.boundary_weight),
        "lengths": ", ".join(format_number(n) for n in section.lengths),
        "world_size": format_number(section.world_size),
        "forward_calls": format_number(section.forward_calls),
        "max_leak": format_number(section.leak_max),
        "leak_threshold": format_number(section.leak_threshold),
        "rules": [
            {
                "rule": item.rule,
                "words": RULE_WORDS.get(item.rule, ""),
                "deviation": format_number(item.max_deviation),
            }
            for item in section.rules
        ],
        "settings": [
            (str(key), format_number(value)) for key, value in sorted(section.settings.items())
        ],
        "notes": list(section.notes),
        "sequence_rows": rows,
        "leak_rows": [
            {"sequence": labels[i], "values": [format_number(v) for v in row]}
            for i, row in enumerate(matrix)
        ]
        if len(matrix) <= MAX_MATRIX_SEQUENCES
        else [],
        "strips_svg": Markup(weight_strips(strips)) if strips else None,
        "matrix_svg": Markup(leak_matrix(labels, matrix))
        if matrix and len(matrix) <= MAX_MATRIX_SEQUENCES
        else None,
        "seconds": format_number(section.seconds),
    }
