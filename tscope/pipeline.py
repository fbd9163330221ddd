"""analyze(path) -> Case: ingest → normalized run → analyzers → case. No rendering here."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

from tscope import __version__
from tscope.chart_buckets import bucketed
from tscope.errors import NothingToAnalyze, SeveralRuns, UsageError
from tscope.ingest.assemble import assemble_run
from tscope.ingest.checkpoint_evidence import read_checkpoints
from tscope.ingest.checkpoints import checkpoint_inventory
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.discover import discover
from tscope.ingest.remote_source import is_remote_url
from tscope.ingest.run_config import checkpoint_config
from tscope.ingest.run_groups import run_groups, several_runs_message
from tscope.ingest.safe_fs import NOT_REGULAR
from tscope.model import Case, CheckpointInfo, Finding, PartialInput, Run
from tscope.model.case_fields import Fields
from tscope.model.case_parts import LayerHeatmap, RunHeader, Summary
from tscope.model.checkpoint import CheckpointEvidence
from tscope.model.metric_names import LOSS

if TYPE_CHECKING:
    from tscope.ingest.remote_mirror import Mirror

# Charts keep at most this many buckets per series; each bucket keeps its last value and its
# min/max, so a one-step spike in a 10^6-step run still shows at full height.
CHART_BUCKETS = 1200


class Analysis(NamedTuple):
    case: Case
    run: Run  # the normalized run behind the case, every point at full resolution


def analyze(
    *paths: str | Path,
    on_file: Callable[[str], None] | None = None,
    trust_pickle: bool = False,
    read_weights: bool = True,
) -> Case:
    """Read logs and checkpoints under `paths` and build the case.

    `trust_pickle` allows legacy pickles (it runs code from the files: only for trusted inputs);
    `read_weights=False` keeps to logs and the checkpoint inventory (fast, no tensor is loaded).
    """
    return analyze_run(
        *paths, on_file=on_file, trust_pickle=trust_pickle, read_weights=read_weights
    ).case


def analyze_run(
    *paths: str | Path,
    on_file: Callable[[str], None] | None = None,
    trust_pickle: bool = False,
    read_weights: bool = True,
    extra_findings: Sequence[Finding] = (),
) -> Analysis:
    """`analyze`, also returning the normalized run (for cross-run work that needs every step)."""
    if not paths:
        raise UsageError("Give at least one run directory, checkpoint or log file to analyze.")
    reads, partial, checkpoints, unclaimed = [], [], [], []
    # A URL (s3://, gs://, hf://…) is mirrored into the local cache first; everything after reads
    # the mirror like any local folder, and the case names the URL.
    mirrors = [_mirrored(p, read_weights, on_file) for p in paths]
    for mirror in mirrors:
        if mirror is not None:
            partial.extend(mirror.partial)
    named = [Path(p) if m is None else m.root for p, m in zip(paths, mirrors, strict=True)]
    roots = [_named_input(path) for path in named]
    evidence_parts: list[CheckpointEvidence] = []
    side_config: dict[str, Any] = {}
    for root in roots:
        found = discover(root, on_file=on_file)
        if root.is_dir():
            groups = run_groups(found.reads)
            if len(groups) > 1:  # never merged (nor all but one dropped) silently
                raise SeveralRuns(several_runs_message(str(root), groups))
        reads.extend(found.reads)
        partial.extend(found.partial)
        unclaimed.extend(found.unclaimed)
        inventory = checkpoint_inventory(root)
        checkpoints.extend(inventory)
        for key, value in checkpoint_config(root, inventory).items():
            side_config.setdefault(key, value)
        if read_weights:
            evidence, checkpoint_partial = read_checkpoints(
                root, LoadOptions(trust_pickle=trust_pickle), on_file
            )
            partial.extend(checkpoint_partial)
            if evidence is not None:
                evidence_parts.append(evidence)
    name = roots[0].resolve().name if roots[0].is_dir() else roots[0].stem
    shown_input = mirrors[0].url if mirrors[0] is not None else str(roots[0].resolve())
    run = assemble_run(name, shown_input, reads, partial)
    for key, value in side_config.items():
        run.config.setdefault(key, value)  # what the logs recorded wins
    checkpoint_evidence = _merge(evidence_parts)
    if checkpoint_evidence is not None:
        checkpoints = [snapshot.info for snapshot in checkpoint_evidence.snapshots]
    # Checkpoints whose every file was refused (all Git LFS pointers, all damaged) are listed by
    # the inventory but hold nothing to judge: without metrics that is not a healthy run.
    no_tensor_read = read_weights and (
        checkpoint_evidence is None or checkpoint_evidence.layers.empty
    )
    if run.metrics.empty and (not checkpoints or no_tensor_read):
        shown = [p if m is None else m.url for p, m in zip(paths, mirrors, strict=True)]
        raise NothingToAnalyze(_nothing_message(shown, partial, unclaimed))
    return Analysis(build_case(run, checkpoints, checkpoint_evidence, extra_findings), run)


def _mirrored(
    path: str | Path, read_weights: bool, on_file: Callable[[str], None] | None
) -> Mirror | None:
    """The local mirror of a URL input (None for a local path)."""
    if not (isinstance(path, str) and is_remote_url(path)):
        return None
    from tscope.ingest.remote_mirror import mirror_run

    return mirror_run(path, read_weights=read_weights, on_file=on_file)


def _named_input(path: Path) -> Path:
    """A path the user named, resolved once: the user chose it, so a link here is followed (and
    no link inside it is). Only a folder or a regular file can be read."""
    if not path.exists():
        raise UsageError(f"{path} does not exist. Pass a run directory, checkpoint or log file.")
    resolved = path.resolve()
    if not (resolved.is_dir() or resolved.is_file()):
        raise UsageError(f"{path}: {NOT_REGULAR}. Pass a run directory, checkpoint or log file.")
    return resolved


def _merge(parts: list[CheckpointEvidence]) -> CheckpointEvidence | None:
    if not parts:
        return None
    if len(parts) == 1:
        return parts[0]
    import pandas as pd

    snapshots = tuple(s for part in parts for s in part.snapshots)
    return CheckpointEvidence(snapshots, pd.concat([p.layers for p in parts], ignore_index=True))


def build_case(
    run: Run,
    checkpoints: list[CheckpointInfo],
    checkpoint_evidence: CheckpointEvidence | None = None,
    extra_findings: Sequence[Finding] = (),
) -> Case:
    """`extra_findings`: found by other components (a replay), ranked with the rest."""
    from tscope.analyzers import Evidence, explain
    from tscope.analyzers.detect import detect
    from tscope.analyzers.incidents import incidents as find_incidents
    from tscope.analyzers.ranking import rank_findings
    from tscope.analyzers.story import build_story
    from tscope.analyzers.summary import alternatives, limits, summarize

    spikes, change_points = detect(run)
    evidence = Evidence(run, spikes, change_points, checkpoint_evidence)
    incidents = find_incidents(evidence)
    findings = rank_findings(explain(evidence) + list(extra_findings), incidents)
    case = Case(
        run=RunHeader(
            name=run.name,
            path=run.path,
            sources=tuple(run.sources),
            first_step=run.first_step,
            last_step=run.last_step,
            config=run.config,
        ),
        metrics=run.metric_names,
        spikes=spikes,
        change_points=change_points,
        findings=findings,
        story=build_story(evidence, incidents, findings),
        checkpoints=list(checkpoints),
        partial=list(run.partial),
        alternatives=alternatives(evidence, incidents, findings),
        limits=limits(evidence, has_checkpoints=bool(checkpoints)),
        caveats=list(run.caveats),
        events=list(run.events),
        summary=analyzed_summary(
            summarize(evidence, incidents, findings, list(checkpoints)), partial=bool(run.partial)
        ),
        chart_series={m: chart_series(run, m) for m in run.metric_names},
        tool_version=__version__,
    )
    if checkpoint_evidence is not None and not checkpoint_evidence.layers.empty:
        case.layers = layer_heatmap(checkpoint_evidence.layers)
        case.layers_table = checkpoint_evidence.layers
    return case


def chart_series(run: Run, metric: str) -> dict[str, list[object]]:
    """The chart's points; a loss the producer logged as 0.0 or a running mean where the step
    was non-finite (the Trainer's logging_nan_inf_filter) is drawn as the NaN it was."""
    from tscope.analyzers.signals import loss_series

    steps, values = loss_series(run, metric) if metric == LOSS else run.series(metric)
    if steps.size <= CHART_BUCKETS:
        return {
            "steps": steps.tolist(),
            "values": values.tolist(),
            "min": values.tolist(),
            "max": values.tolist(),
        }
    return bucketed(steps, values, CHART_BUCKETS)


def _nothing_message(
    roots: Sequence[str | Path], partial: list[PartialInput], unclaimed: list[str]
) -> str:
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


# The summary keys the typed case holds (the analyzers' summary dict may use no other).
SUMMARY_FIELDS = {summary_field.name for summary_field in fields(Summary)}

# Heat-map size: the layers with the largest peak update ratio (a report is read in a minute).
HEATMAP_MAX_LAYERS = 40


def layer_heatmap(layers: Any) -> LayerHeatmap:
    """names × checkpoint steps matrices of the update ratio and norm growth, for the report."""
    steps = sorted(int(s) for s in layers["step"].unique())
    ratio = layers.pivot_table(index="tensor", columns="step", values="update_ratio_per_step")
    growth = layers.pivot_table(index="tensor", columns="step", values="norm_growth_rate")
    order = ratio.max(axis=1).sort_values(ascending=False).index[:HEATMAP_MAX_LAYERS].tolist()
    if not order:
        order = sorted(layers["tensor"].unique().tolist())[:HEATMAP_MAX_LAYERS]

    def matrix(table: Any) -> tuple[tuple[float | None, ...], ...]:
        table = table.reindex(index=order, columns=steps)
        return tuple(
            tuple(None if value != value else float(value) for value in row)
            for row in table.to_numpy().tolist()
        )

    return LayerHeatmap(
        tuple(steps), tuple(str(name) for name in order), matrix(ratio), matrix(growth)
    )


def analyzed_summary(summary: dict[str, object], partial: bool) -> Summary:
    """The analyzers' summary (tscope.analyzers.summary) as the typed section; `partial` when some
    input could not be read."""
    unknown = sorted(set(summary) - SUMMARY_FIELDS)
    if unknown:  # a bug, not bad input: the key would be dropped from case.json silently
        raise ValueError(
            f"summary keys {unknown} are not in tscope.model.case_parts.Summary: add them there"
        )
    typed = Summary.from_fields(Fields(summary, "summary"))
    return replace(typed, partial=True) if partial else typed
