"""The cluster payload turned into what cluster.html and cluster.md print, in print order.

As for a case (tscope.render.view): every number is formatted and every list ordered here, every
missing section given its empty default here, and the templates only lay the strings out and
escape them. The payload is read with `.get` and defaults: cluster.json may come from an older
tscope, or be edited by hand.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from tscope.render.cluster_charts import aligned_spike_ids
from tscope.render.formatting import MISSING, format_number, format_step, format_value, one_line
from tscope.render.series import as_list, as_mapping, as_records

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


def build_cluster_view(payload: dict[str, Any], out_dir: Path | None = None) -> dict[str, Any]:
    """Everything the cluster templates print, as strings. `out_dir` (where cluster.html goes)
    lets each run link its own case.html when that file exists; without it no link is made."""
    summary = as_mapping(payload.get("summary"))
    runs = as_records(payload.get("runs"))
    clusters = as_records(payload.get("clusters"))
    findings = as_records(payload.get("findings"))
    spikes = aligned_spike_ids(payload)
    spike_steps = {spike.get("first_step") for _, spike in spikes}
    unstable = [run for run in runs if run.get("status") == "unstable"]
    return {
        "runs_dir": str(payload.get("runs_dir") or ""),
        "status": "unstable" if unstable else "stable",
        "status_label": f"{len(unstable)} of {len(runs)} blew up"
        if unstable
        else f"All {len(runs)} stable",
        "verdict": one_line(str(summary.get("verdict") or "No verdict was recorded.")),
        "counts": _counts(summary, runs, clusters, payload),
        "clusters": [_cluster_view(index, item) for index, item in enumerate(clusters)],
        "aligned_spikes": [_spike_view(spike_id, spike, findings) for spike_id, spike in spikes],
        "data_order_note": _shared_evidence([spike for _, spike in spikes]),
        "other_findings": [
            _finding_view(item)
            for item in findings
            if not (_is_spike_finding(item) and item.get("step") in spike_steps)
        ],
        "runs": [_run_view(run, out_dir) for run in sorted(runs, key=_run_order)],
        "limits": [one_line(str(item)) for item in as_list(payload.get("limits"))],
        "skipped": [
            {"run": str(item.get("run", "")), "problem": one_line(str(item.get("problem", "")))}
            for item in as_records(payload.get("skipped"))
        ],
        "method": [
            (METHOD_LABELS.get(str(key), str(key).replace("_", " ")), format_value(value))
            for key, value in sorted(as_mapping(payload.get("method")).items())
        ],
        "tool": _tool_line(payload),
    }


def aligned_chart_name(index: int) -> str:
    """The chart key of the cluster at `index` (0-based): also names its SVG file."""
    return f"aligned-{index + 1}"


def _counts(
    summary: dict[str, Any],
    runs: list[dict[str, Any]],
    clusters: list[dict[str, Any]],
    payload: dict[str, Any],
) -> str:
    """ "8 runs · 4 unstable in 1 cluster · 4 stable · 0 aligned spikes", from the summary when it
    has the count, else counted from the lists."""

    def count(key: str, fallback: int) -> int:
        value = summary.get(key)
        return value if isinstance(value, int) and not isinstance(value, bool) else fallback

    total = count("runs", len(runs))
    unstable = count("unstable", sum(run.get("status") == "unstable" for run in runs))
    stable = count("stable", sum(run.get("status") == "stable" for run in runs))
    groups = count("clusters", len(clusters))
    spikes = count("aligned_spikes", len(as_list(payload.get("aligned_spikes"))))
    parts = [_plural(total, "run")]
    if unstable:
        parts += [f"{unstable} unstable in {_plural(groups, 'cluster')}", f"{stable} stable"]
    else:
        parts.append("all stable")
    parts.append(_plural(spikes, "aligned spike"))
    skipped = len(as_list(payload.get("skipped")))
    if skipped:
        parts.append(f"{skipped} skipped")
    return " · ".join(parts)


def _cluster_view(index: int, cluster: dict[str, Any]) -> dict[str, Any]:
    members = [str(name) for name in as_list(cluster.get("runs"))]
    mode = str(cluster.get("failure_mode") or "")
    return {
        "id": str(cluster.get("id") or f"C{index + 1}"),
        "label": one_line(str(cluster.get("label") or "")),
        "members": members,
        "size": _plural(len(members), "run"),
        "failure_mode": FAILURE_MODES.get(mode, mode or MISSING),
        "traits": [
            {
                "text": one_line(str(trait.get("text") or _trait_text(trait))),
                "accuracy": format_number(trait.get("balanced_accuracy")),
                "member_values": format_value(as_list(trait.get("member_values"))),
                "stable_values": format_value(as_list(trait.get("stable_values"))),
            }
            for trait in as_records(cluster.get("discriminant_traits"))
        ],
        "lead": _lead_text(
            cluster.get("typical_lead_steps"), cluster.get("warned_runs"), len(members)
        ),
        "signals": [
            {
                "kind": str(signal.get("kind", "")),
                "runs": f"{format_number(signal.get('runs'))} of {len(members)}",
                "offset": _offset_text(signal.get("median_offset_steps")),
            }
            for signal in as_records(cluster.get("signal_detail"))
        ],
        "signals_title": _signals_title(as_records(cluster.get("signal_detail"))),
        "counterexample": _counterexample_view(cluster.get("counterexample")),
        "chart": aligned_chart_name(index),
    }


def _trait_text(trait: dict[str, Any]) -> str:
    symbol = {">=": "≥", "<=": "≤", "==": "="}.get(str(trait.get("op")), str(trait.get("op", "")))
    return f"{trait.get('field', '')} {symbol} {format_value(trait.get('value'))}"


def _lead_text(lead: Any, warned: Any, members: int) -> str:
    if not isinstance(lead, int) or isinstance(lead, bool):
        if isinstance(warned, int) and not isinstance(warned, bool) and warned > 0:
            return (
                f"Only {warned} of {members} runs gave a signal before their explosion: "
                "no typical warning time."
            )
        return "No signal came before the explosion in any member."
    if lead == 0:
        return "The first signal typically fired at the explosion step itself: no warning."
    return f"The first signal typically fired {_plural(lead, 'step')} before the explosion."


def _signals_title(signals: list[dict[str, Any]]) -> str:
    """ "Warning signs" only when a signal typically came before the explosion; signals that all
    followed it are its consequences, and calling them warnings would promise a lead time."""
    offsets = [signal.get("median_offset_steps") for signal in signals]
    before = [o for o in offsets if isinstance(o, int) and not isinstance(o, bool) and o < 0]
    if before:
        return "Warning signs and what followed"
    return "Signals (all at or after the explosion: no warning sign)" if signals else "Signals"


def _offset_text(offset: Any) -> str:
    """Median step of a signal relative to the explosion: negative is before it."""
    if not isinstance(offset, int) or isinstance(offset, bool):
        return MISSING
    if offset == 0:
        return "0 (at the explosion)"
    return f"{offset} (before)" if offset < 0 else f"+{offset} (after)"


def _counterexample_view(raw: Any) -> dict[str, Any] | None:
    if not isinstance(raw, dict):
        return None
    distance = raw.get("config_distance")
    return {
        "run": str(raw.get("run", "")),
        "stable_run": str(raw.get("stable_run", "")),
        "distance": _distance_text(distance),
        "diff": [
            {
                "field": str(row.get("field", "")),
                "run_value": format_value(row.get("run_value")),
                "stable_value": format_value(row.get("stable_value")),
            }
            for row in as_records(raw.get("config_diff"))
        ],
    }


def _distance_text(distance: Any) -> str:
    if not isinstance(distance, int) or isinstance(distance, bool):
        return "the number of differing settings is unknown"
    return "1 setting differs" if distance == 1 else f"{distance} settings differ"


def _spike_view(
    spike_id: str, spike: dict[str, Any], findings: list[dict[str, Any]]
) -> dict[str, Any]:
    first, last = spike.get("first_step"), spike.get("last_step")
    runs = [str(name) for name in as_list(spike.get("runs"))]
    peaks = as_list(spike.get("peak_steps"))
    compared = spike.get("runs_compared")
    named = [
        f"{name} @ {format_step(peaks[i])}" if i < len(peaks) else name
        for i, name in enumerate(runs)
    ]
    everyone = isinstance(compared, int) and len(runs) >= compared
    shown = [] if everyone else named[:MAX_NAMED_RUNS]
    if len(named) > len(shown) and shown:
        shown.append(f"… {len(named) - len(shown)} more in cluster.json")
    finding = next(
        (item for item in findings if _is_spike_finding(item) and item.get("step") == first), None
    )
    return {
        "id": spike_id,
        "steps": format_step(first)
        if last in (None, first)
        else f"{format_step(first)}–{format_step(last)}",
        "runs": f"{len(runs)} of {format_number(compared)}"
        + (" (all compared)" if everyone else ""),
        "named_runs": shown,
        "p_value": format_number(spike.get("p_value")),
        "data_order": str(spike.get("shared_data_order") or "unknown"),
        "data_order_evidence": one_line(str(spike.get("data_order_evidence") or "")),
        "finding": None if finding is None else _finding_view(finding),
    }


def _shared_evidence(spikes: list[dict[str, Any]]) -> str:
    """The data-order evidence when every aligned spike has the same (said once, not per row)."""
    evidence = {one_line(str(spike.get("data_order_evidence") or "")) for spike in spikes}
    return evidence.pop() if len(evidence) == 1 else ""


def _is_spike_finding(finding: dict[str, Any]) -> bool:
    """The finding the analysis writes for each aligned spike, at the spike's first step."""
    return finding.get("category") == "data_aligned_spike"


def _finding_view(finding: dict[str, Any]) -> dict[str, str]:
    return {
        "category": str(finding.get("category", "")),
        "severity": str(finding.get("severity", "")),
        "step": format_step(finding.get("step")),
        "message": one_line(str(finding.get("message", ""))),
        "suggestion": one_line(str(finding.get("suggestion") or "")),
    }


def _run_view(run: dict[str, Any], out_dir: Path | None) -> dict[str, Any]:
    first = run.get("first_signal")
    link, shown_path = _case_link(str(run.get("case") or ""), out_dir)
    kind = str(run.get("explosion_kind") or "")
    lead = run.get("lead_steps")
    return {
        "name": str(run.get("name", "")),
        "status": str(run.get("status", "")),
        "cluster": str(run.get("cluster") or MISSING),
        "explosion_step": format_step(run.get("explosion_step")),
        "explosion_kind": EXPLOSION_KINDS.get(kind, kind),
        "first_signal": f"{first} @ {format_step(run.get('first_signal_step'))}"
        if first
        else MISSING,
        "lead": _plural(lead, "step") if isinstance(lead, int) else MISSING,
        "final_loss": format_number(run.get("final_loss")),
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


def _run_order(run: dict[str, Any]) -> tuple[bool, str, str]:
    """Unstable runs first, grouped by cluster; then stable runs; by name within each."""
    return (run.get("status") != "unstable", str(run.get("cluster") or "~"), str(run.get("name")))


def _plural(count: Any, noun: str) -> str:
    number = format_number(count)
    return f"{number} {noun}" if count == 1 else f"{number} {noun}s"


def _tool_line(payload: dict[str, Any]) -> str:
    tool = as_mapping(payload.get("tool"))
    return f"tscope {tool.get('version', '?')}, cluster schema {payload.get('schema_version', '?')}"
