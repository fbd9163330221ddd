"""The robustness sweep's report: one table row per variant, then one section per variant."""

from __future__ import annotations

import json
from typing import Any

from sweep_scoring import Outcome, short_finding
from sweep_variants import Variant


def planted_cell(variant: Variant) -> str:
    if variant.cause is None:
        if variant.step is not None:
            return f"control (benign resume @ckpt-{variant.step}; {variant.strength})"
        return "control"
    at = (
        f"ckpt-{variant.step}" if variant.cause == "resume_no_scheduler" else f"step {variant.step}"
    )
    return f"{variant.cause} @{at}, {variant.strength}"


def table(outcomes: list[Outcome]) -> str:
    header = (
        "| variant | seed | planted | expected | tscope top 3 (C/W/i category@step) | status "
        "| result | false alarms |"
    )
    lines = [header, "|" + "---|" * 8]
    for o in outcomes:
        v = o.variant
        expected = ", ".join(v.expected) or "no warning/critical"
        if o.error is not None:
            found, result = f"ERROR {o.error[:80]}", "ERROR"
        else:
            found = "; ".join(short_finding(f) for f in o.top) or "(none)"
            failed = [name for name, ok in o.checks if not ok]
            result = o.result
            if o.not_scored is not None:
                result = f"n/a: {o.not_scored}"
            elif failed:
                result = "MISS: " + "; ".join(failed)
        alarms = "; ".join(short_finding(f) for f in o.false_alarms) or "-"
        lines.append(
            f"| {v.name} | {v.seed} | {planted_cell(v)} | {expected} | {found} | {o.status} "
            f"| {result} | {alarms} |"
        )
    return "\n".join(lines)


def _evidence_text(evidence: dict[str, Any]) -> str:
    text = json.dumps(evidence, default=str, sort_keys=True)
    return text if len(text) <= 400 else text[:400] + "…"


def details(outcomes: list[Outcome]) -> str:
    lines: list[str] = []
    for o in outcomes:
        v = o.variant
        timing = (
            f"train {o.train_seconds:.0f} s, " if o.train_seconds is not None else "reused, "
        ) + f"analyze {o.analyze_seconds:.1f} s"
        lines.append(f"\n## {v.name} — {v.spec.description} (seed {v.seed}; {timing})")
        if o.error is not None:
            lines.append(f"  ERROR {o.error}")
            continue
        if v.related is not None:
            lines.append(f"  related steps: {v.related[0]}-{v.related[1]}")
        for note in v.notes:
            lines.append(f"  note: {note}")
        lines.append(f"  status {o.status}; verdict: {o.verdict}")
        for name, ok in o.checks:
            lines.append(f"  [{'ok' if ok else 'MISS'}] {name}")
        lines.extend(f"  {line}" for line in o.evidence)
        if o.loud:
            lines.append("  warning/critical findings:")
        for f in o.loud:
            flag = "FALSE ALARM " if f in o.false_alarms else ""
            lines.append(
                f"    {flag}{f.severity} {f.category} step {f.step} ({f.source}"
                f"{', layer ' + f.layer if f.layer else ''}): {f.message}"
            )
            if flag:
                lines.append(f"      evidence: {_evidence_text(f.evidence)}")
                if f.threshold:
                    lines.append(f"      threshold: {f.threshold}")
    return "\n".join(lines)
