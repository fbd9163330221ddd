"""The case's `xray` section turned into what the templates print.

view["xray"] = xray_view(case.xray)   # None when the case has no token audit: nothing renders
"""

from __future__ import annotations

from typing import Any

from markupsafe import Markup

from tscope.render.formatting import format_number, parse_number
from tscope.render.series import as_list, as_mapping, as_records
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


def xray_view(section: dict[str, Any] | None) -> dict[str, Any] | None:
    if section is None:
        return None
    tokens = as_records(section.get("tokens"))
    by_sequence: dict[int, list[dict[str, Any]]] = {}
    for token in tokens:
        sequence = int(parse_number(token.get("sequence")) or 0)
        by_sequence.setdefault(sequence, []).append(token)
    strips = []
    rows = []
    for sequence, items in sorted(by_sequence.items()):
        items.sort(key=lambda t: parse_number(t.get("position")) or 0)
        cells = [
            (
                parse_number(t.get("weight")),
                f"sequence {sequence}, token {format_number(t.get('position'))}: weight "
                f"{format_number(t.get('weight'))}, cos {format_number(t.get('cosine'))}, "
                f"micro-batch {format_number(t.get('micro_batch'))}, rank "
                f"{format_number(t.get('rank'))}",
            )
            for t in items
        ]
        strips.append((f"seq {sequence} ({len(items)})", cells))
        weights = [parse_number(t.get("weight")) for t in items]
        finite = [w for w in weights if w is not None]
        rows.append(
            {
                "sequence": str(sequence),
                "targets": str(len(items)),
                "weights": ", ".join(format_number(w) for w in weights),
                "mean": format_number(sum(finite) / len(finite)) if finite else "—",
            }
        )
    leak = as_mapping(section.get("leak"))
    matrix = [[parse_number(v) for v in as_list(row)] for row in as_list(leak.get("matrix"))]
    labels = [f"seq {i}" for i in range(len(matrix))]
    intended = str(section.get("intended") or "token_mean")
    matched = str(section.get("matched_rule") or "")
    return {
        "mode": str(section.get("mode") or ""),
        "source": str(section.get("source") or ""),
        "intended": intended,
        "intended_words": RULE_WORDS.get(intended, intended),
        "matched": matched,
        "matched_words": RULE_WORDS.get(matched, matched),
        "matched_rules": ", ".join(str(r) for r in as_list(section.get("matched_rules"))),
        "matched_deviation": format_number(section.get("matched_max_deviation")),
        "intended_deviation": format_number(section.get("intended_max_deviation")),
        "min_cosine": format_number(section.get("min_cosine")),
        "boundary_weight": format_number(section.get("boundary_weight")),
        "lengths": ", ".join(format_number(n) for n in as_list(section.get("lengths"))),
        "world_size": format_number(section.get("world_size")),
        "forward_calls": format_number(section.get("forward_calls")),
        "max_leak": format_number(leak.get("max")),
        "leak_threshold": format_number(leak.get("threshold")),
        "rules": [
            {
                "rule": str(item.get("rule", "")),
                "words": RULE_WORDS.get(str(item.get("rule", "")), ""),
                "deviation": format_number(item.get("max_deviation")),
            }
            for item in as_records(section.get("rules"))
        ],
        "settings": [
            (str(key), format_number(value))
            for key, value in sorted(as_mapping(section.get("settings")).items())
        ],
        "notes": [str(note) for note in as_list(section.get("notes"))],
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
        "seconds": format_number(section.get("seconds")),
    }
