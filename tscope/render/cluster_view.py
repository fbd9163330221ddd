"""The cluster payload turned into what cluster.html and cluster.md print, in print order.

As for a case (tscope.render.view): every number is formatted and every list ordered here, every
missing section given its empty default here, and the templates only lay the strings out and
escape them. cluster.json is read typed (tscope.model.cluster_file.ClusterFile): a field an older
tscope or a hand edit left out arrives as its default, one of the wrong type was refused there.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tscope.model.case import Finding
from tscope.model.cluster_file import (
    AlignedSpikeRow,
    ClusterFile,
    ClusterRow,
    ClusterRunRow,
    CounterexampleRow,
    SignalRow,
    TraitRow,
)
from tscope.render.cluster_charts import aligned_spike_ids
from tscope.render.formatting import MISSING, format_number, format_step, format_value, one_line

FAILURE_MODES = {
    "blowup": "blew up and never recovered",
    "recovered": "blew up, then recovered",
    "divergence": "diverged slowly",
}
EXPLOSION_KINDS = {
    "nonfinite": "NaN/Inf loss",
    "above_baseline": "loss far above its start",
    "divergence": "divergence",
}
METHOD_LABELS = {
    "status": "Stable or unstable",
    "clustering": "Clusters",
    "traits": "Traits",
    "aligned_spikes": "Aligned spikes",
}
# An aligned spike seen in a few of many runs names them; one seen in every run says "all".
MAX_NAMED_RUNS = 8
CASE_HTML = "case.html"  # the per-run report beside each run's case.json


def build_cluster_view(report: ClusterFile, out_dir: Path | None = None) -> dict[str, Any]:
    """Everything the cluster templates print, as strings. `out_dir` (where cluster.html goes)
    lets each run link its own case.html when that file exists; without it no link is made."""
    runs = report.runs
    spikes = aligned_spike_ids(report)
    spike_steps = {spike.first_step for _, spike in spikes}
    unstable = [run for run in runs if run.status == "unstable"]
    return {
        "runs_dir": report.runs_dir,
        "status": "unstable" if unstable else "stable",
        "status_label": f"{len(unstable)} of {len(runs)} blew up"
        if unstable
        else f"All {len(runs)} stable",
        "verdict": one_line(report.verdict or "No verdict was recorded."),
        "counts": _counts(report),
        "clusters": [_cluster_view(index, item) for index, item in enumerate(report.clusters)],
        "aligned_spikes": [
            _spike_view(spike_id, spike, report.findings) for spike_id, spike in spikes
        ],
        "data_order_note": _shared_evidence([spike for _, spike in spikes]),
        "other_findings": [
            _finding_view(item)
            for item in report.findings
            if not (_is_spike_finding(item) and item.step in spike_steps)
        ],
        "runs": [_run_view(run, out_dir) for run in sorted(runs, key=_run_order)],
        "limits": [one_line(item) for item in report.limits],
        "skipped": [
            {"run": item.run, "problem": one_line(item.problem)} for item in report.skipped
        ],
        "method": [
            (METHOD_LABELS.get(key, key.replace("_", " ")), format_value(value))
            for key, value in sorted(report.method.items())
        ],
        "tool": f"tscope {report.tool_version}, cluster schema {report.schema_version}",
    }


def aligned_chart_name(index: int) -> str:
    """The chart key of the cluster at `index` (0-based): also names its SVG file."""
    return f"aligned-{index + 1}"


def _counts(report: ClusterFile) -> str:
    """ "8 runs · 4 unstable in 1 cluster · 4 stable · 0 aligned spikes", from the summary when it
    has the count, else counted from the lists."""
    runs = report.runs
    counts = report.counts
    total = counts.get("runs", len(runs))
    unstable = counts.get("unstable", sum(run.status == "unstable" for run in runs))
    stable = counts.get("stable", sum(run.status == "stable" for run in runs))
    groups = counts.get("clusters", len(report.clusters))
    spikes = counts.get("aligned_spikes", len(report.aligned_spikes))
    parts = [_plural(total, "run")]
    if unstable:
        parts += [f"{unstable} unstable in {_plural(groups, 'cluster')}", f"{stable} stable"]
    else:
        parts.append("all stable")
    parts.append(_plural(spikes, "aligned spike"))
    if report.skipped:
        parts.append(f"{len(report.skipped)} skipped")
    read_in_part = sum(run.unread_files > 0 for run in runs)
    if read_in_part:
        parts.append(f"{read_in_part} read in part")
    return " · ".join(parts)


def _cluster_view(index: int, cluster: ClusterRow) -> dict[str, Any]:
    members = list(cluster.runs)
    mode = cluster.failure_mode
    return {
        "id": cluster.id or f"C{index + 1}",
        "label": one_line(cluster.label),
        "members": members,
        "size": _plural(len(members), "run"),
        "failure_mode": FAILURE_MODES.get(mode, mode or MISSING),
        "traits": [
            {
                "text": one_line(trait.text or _trait_text(trait)),
                "accuracy": format_number(trait.balanced_accuracy),
                "member_values": format_value(list(trait.member_values)),
                "stable_values": format_value(list(trait.stable_values)),
            }
            for trait in cluster.traits
        ],
        "lead": _lead_text(cluster.typical_lead_steps, cluster.warned_runs, len(members)),
        "signals": [
            {
                "kind": signal.kind,
                "runs": f"{format_number(signal.runs)} of {len(members)}",
                "offset": _offset_text(signal.median_offset_steps),
            }
            for signal in cluster.signal_detail
        ],
        "signals_title": _signals_title(cluster.signal_detail),
        "counterexample": _counterexample_view(cluster.counterexample),
        "chart": aligned_chart_name(index),
    }


def _trait_text(trait: TraitRow) -> str:
    symbol = {">=": "≥", "<=": "≤", "==": "="}.get(trait.op, trait.op)
    return f"{trait.field} {symbol} {format_value(trait.value)}"


def _lead_text(lead: int | None, warned: int | None, members: int) -> str:
    if lead is None:
        if warned is not None and warned > 0:
            return (
                f"Only {warned} of {members} runs gave a signal before their explosion: "
                "no typical warning time."
            )
        return "No signal came before the explosion in any member."
    if lead == 0:
        return "The first signal typically fired at the explosion step itself: no warning."
    return f"The first signal typically fired {_plural(lead, 'step')} before the explosion."


def _signals_title(signals: tuple[SignalRow, ...]) -> str:
    """ "Warning signs" only when a signal typically came before the explosion; signals that all
    followed it are its consequences, and calling them warnings would promise a lead time."""
    offsets = [signal.median_offset_steps for signal in signals]
    if any(offset is not None and offset < 0 for offset in offsets):
        return "Warning signs and what followed"
    return "Signals (all at or after the explosion: no warning sign)" if signals else "Signals"


def _offset_text(offset: int | None) -> str:
    """Median step of a signal relative to the explosion: negative is before it."""
    if offset is None:
        return MISSING
    if offset == 0:
        return "0 (at the explosion)"
    return f"{offset} (before)" if offset < 0 else f"+{offset} (after)"


def _counterexample_view(counter: CounterexampleRow | None) -> dict[str, Any] | None:
    if counter is None:
        return None
    return {
        "run": counter.run,
        "stable_run": counter.stable_run,
        "distance": _distance_text(counter.config_distance),
        "diff": [
            {
                "field": name,
                "run_value": format_value(mine),
                "stable_value": format_value(theirs),
            }
            for name, mine, theirs in counter.config_diff
        ],
    }


def _distance_text(distance: int | None) -> str:
    if distance is None:
        return "the number of differing settings is unknown"
    return "1 setting differs" if distance == 1 else f"{distance} settings differ"


def _spike_view(
    spike_id: str, spike: AlignedSpikeRow, findings: tuple[Finding, ...]
) -> dict[str, Any]:
    first, last = spike.first_step, spike.last_step
    runs = list(spike.runs)
    peaks = spike.peak_steps
    compared = spike.runs_compared
    named = [
        f"{name} @ {format_step(peaks[i])}" if i < len(peaks) else name
        for i, name in enumerate(runs)
    ]
    everyone = compared is not None and len(runs) >= compared
    shown = [] if everyone else named[:MAX_NAMED_RUNS]
    if len(named) > len(shown) and shown:
        shown.append(f"… {len(named) - len(shown)} more in cluster.json")
    finding = next(
        (item for item in findings if _is_spike_finding(item) and item.step == first), None
    )
    return {
        "id": spike_id,
        "steps": format_step(first)
        if last in (None, first)
        else f"{format_step(first)}–{format_step(last)}",
        "runs": f"{len(runs)} of {format_number(compared)}"
        + (" (all compared)" if everyone else ""),
        "named_runs": shown,
        "p_value": format_number(spike.p_value),
        "data_order": spike.shared_data_order or "unknown",
        "data_order_evidence": one_line(spike.data_order_evidence),
        "finding": None if finding is None else _finding_view(finding),
    }


def _shared_evidence(spikes: list[AlignedSpikeRow]) -> str:
    """The data-order evidence when every aligned spike has the same (said once, not per row)."""
    evidence = {one_line(spike.data_order_evidence) for spike in spikes}
    return evidence.pop() if len(evidence) == 1 else ""


def _is_spike_finding(finding: Finding) -> bool:
    """The finding the analysis writes for each aligned spike, at the spike's first step."""
    return finding.category == "data_aligned_spike"


def _finding_view(finding: Finding) -> dict[str, str]:
    return {
        "category": finding.category,
        "severity": finding.severity,
        "step": format_step(finding.step),
        "message": one_line(finding.message),
        "suggestion": one_line(finding.suggestion),
    }


def _run_view(run: ClusterRunRow, out_dir: Path | None) -> dict[str, Any]:
    first = run.first_signal
    link, shown_path = _case_link(run.case, out_dir)
    kind = run.explosion_kind
    lead = run.lead_steps
    return {
        "name": run.name,
        "status": run.status
        + (
            f" (read in part: {_plural(run.unread_files, 'file')} not read)"
            if run.unread_files
            else ""
        ),
        "cluster": run.cluster or MISSING,
        "explosion_step": format_step(run.explosion_step),
        "explosion_kind": EXPLOSION_KINDS.get(kind, kind),
        "first_signal": f"{first} @ {format_step(run.first_signal_step)}" if first else MISSING,
        "lead": _plural(lead, "step") if lead is not None else MISSING,
        "final_loss": format_number(run.final_loss),
        "case_link": link,
        "case_path": shown_path,
    }


def _case_link(case_json: str, out_dir: Path | None) -> tuple[str | None, str]:
    """(href of the run's case.html relative to out_dir, or None; the case.json path to show).

    The pipeline records case.json as written (relative to where tscope ran, or absolute); a
    hand-made cluster.json may hold it relative to its own folder: both are tried."""
    if not case_json:
        return None, MISSING
    if out_dir is None:
        return None, case_json
    path = Path(case_json)
    candidates = [path] if path.is_absolute() else [out_dir / path, path]
    shown = case_json
    for candidate in candidates:
        if not candidate.is_file():
            continue
        shown = _relative(candidate, out_dir, inside=True) or case_json
        page = candidate.parent / CASE_HTML
        relative = _relative(page, out_dir) if page.is_file() else None
        if relative is not None:
            return quote(relative), shown
        break
    return None, shown


def _relative(path: Path, base: Path, inside: bool = False) -> str | None:
    """path relative to base with forward slashes; None where there is none (another drive on
    Windows) or, with `inside`, where path is not under base."""
    try:
        relative = Path(os.path.relpath(path.resolve(), base.resolve())).as_posix()
    except ValueError:
        return None
    return None if inside and relative.startswith("../") else relative


def _run_order(run: ClusterRunRow) -> tuple[bool, str, str]:
    """Unstable runs first, grouped by cluster; then stable runs; by name within each."""
    return (run.status != "unstable", run.cluster or "~", run.name)


def _plural(count: Any, noun: str) -> str:
    number = format_number(count)
    return f"{number} {noun}" if count == 1 else f"{number} {noun}s"
