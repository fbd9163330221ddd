"""analyze(path) -> Case: ingest → normalized run → analyzers → case. No rendering here."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np

from tscope import __version__
from tscope.errors import NothingToAnalyze, UsageError
from tscope.ingest.assemble import assemble_run
from tscope.ingest.checkpoints import checkpoint_inventory
from tscope.ingest.discover import discover
from tscope.model import Case, PartialInput, Run

# Charts keep at most this many buckets per series; each bucket keeps its last value and its
# min/max, so a one-step spike in a 10^6-step run still shows at full height.
CHART_BUCKETS = 1200


def analyze(*paths: str | Path, on_file: Callable[[str], None] | None = None) -> Case:
    if not paths:
        raise UsageError("Give at least one run directory, checkpoint or log file to analyze.")
    roots = [Path(p) for p in paths]
    for root in roots:
        if not root.exists():
            raise UsageError(
                f"{root} does not exist. Pass a run directory, checkpoint or log file."
            )
    reads, partial, checkpoints, unclaimed = [], [], [], []
    for root in roots:
        found = discover(root, on_file=on_file)
        reads.extend(found.reads)
        partial.extend(found.partial)
        unclaimed.extend(found.unclaimed)
        checkpoints.extend(checkpoint_inventory(root))
    name = roots[0].resolve().name if roots[0].is_dir() else roots[0].stem
    run = assemble_run(name, str(roots[0].resolve()), reads, partial)
    if run.metrics.empty and not checkpoints:
        raise NothingToAnalyze(_nothing_message(roots, partial, unclaimed))
    return build_case(run, checkpoints)


def build_case(run: Run, checkpoints: list) -> Case:  # type: ignore[type-arg]
    from tscope.analyzers import Evidence, explain
    from tscope.analyzers.detect import detect
    from tscope.analyzers.incidents import incidents as find_incidents
    from tscope.analyzers.ranking import rank_findings
    from tscope.analyzers.story import build_story
    from tscope.analyzers.summary import alternatives, limits, summarize

    spikes, change_points = detect(run)
    evidence = Evidence(run, spikes, change_points)
    incidents = find_incidents(evidence)
    findings = rank_findings(explain(evidence), incidents)
    case = Case(
        run={
            "name": run.name,
            "path": run.path,
            "sources": [{"kind": s.kind, "path": s.path} for s in run.sources],
            "first_step": run.first_step,
            "last_step": run.last_step,
            "config": run.config,
        },
        metrics=run.metric_names,
        spikes=spikes,
        change_points=change_points,
        findings=findings,
        story=build_story(evidence, incidents, findings),
        checkpoints=list(checkpoints),
        partial=[{"path": p.path, "problem": p.problem} for p in run.partial],
        alternatives=alternatives(evidence, incidents, findings),
        limits=limits(evidence, has_checkpoints=bool(checkpoints)),
        caveats=[{"kind": c.kind, "message": c.message, "source": c.source} for c in run.caveats],
        events=[
            {"kind": e.kind, "step": e.step, "detail": e.detail, "source": e.source}
            for e in run.events
        ],
        summary=summarize(evidence, incidents, findings, list(checkpoints)),
        chart_series={m: chart_series(run, m) for m in run.metric_names},
        tool_version=__version__,
    )
    if run.partial:
        case.summary["partial"] = True
    return case


def chart_series(run: Run, metric: str) -> dict[str, list[object]]:
    steps, values = run.series(metric)
    if steps.size <= CHART_BUCKETS:
        return {
            "steps": steps.tolist(),
            "values": values.tolist(),
            "min": values.tolist(),
            "max": values.tolist(),
        }
    buckets = np.array_split(np.arange(steps.size), CHART_BUCKETS)
    out: dict[str, list[object]] = {"steps": [], "values": [], "min": [], "max": []}
    for bucket in buckets:
        chunk = values[bucket]
        finite = chunk[np.isfinite(chunk)]
        nonfinite = chunk[~np.isfinite(chunk)]
        out["steps"].append(int(steps[bucket[-1]]))
        out["values"].append(float(chunk[-1]))
        out["min"].append(float(finite.min()) if finite.size else float(nonfinite[0]))
        out["max"].append(float(nonfinite[0]) if nonfinite.size else float(finite.max()))
    return out


def _nothing_message(roots: list[Path], partial: list[PartialInput], unclaimed: list[str]) -> str:
    where = ", ".join(str(root) for root in roots)
    if partial:
        first = partial[0]
        return f"Nothing analyzable in {where}: {first.path}: {first.problem}" + (
            f" (and {len(partial) - 1} more unreadable files)" if len(partial) > 1 else ""
        )
    if unclaimed:
        return (
            f"No supported log or checkpoint in {where} ({len(unclaimed)} files of unknown format, "
            f"e.g. {unclaimed[0]}). Supported: trainer_state.json, TensorBoard events, W&B "
            "exports and run dirs, CSV/JSONL metrics, nanoGPT/Megatron/Trainer stdout logs."
        )
    return f"{where} holds no files. Pass a run directory, checkpoint or log file."
