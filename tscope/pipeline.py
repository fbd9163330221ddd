"""analyze(path) -> Case: ingest → normalized run → analyzers → case. No rendering here."""

from __future__ import annotations

import gc
import importlib
import sys
from collections.abc import Callable, Sequence
from dataclasses import fields, replace
from pathlib import Path
from typing import NamedTuple

from tscope import __version__
from tscope.chart_data import chart_series, layer_heatmap
from tscope.ingest.inputs import Inputs, ReadOptions, read_inputs
from tscope.model import Case, CheckpointInfo, Finding, PartialInput, Run
from tscope.model.case_fields import Fields
from tscope.model.case_parts import RunHeader, Summary
from tscope.model.checkpoint import CheckpointEvidence
from tscope.numba_loader import load_numba


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
    resolved_paths: bool = False,
) -> Analysis:
    """`analyze`, also returning the normalized run (for cross-run work that needs every step)."""
    _freeze_loaded_objects()
    inputs = read_inputs(
        paths, ReadOptions(read_weights, trust_pickle, on_file, resolved_paths=resolved_paths)
    )
    _freeze_after_heavy_imports(inputs.run)
    return analysis_of(inputs, extra_findings)


_FROZEN: list[bool] = []


def _freeze_loaded_objects() -> None:
    """Once per process, before the first analysis: move the ~150,000 objects the imports left
    (pandas, numpy, numba, the analyzers) out of the cyclic collector's reach. Each full
    collection otherwise walks them all; with a cluster worker's many runs that was ~20% of
    its time (bench/bench_cluster.py). They live as long as the process anyway; later garbage
    is collected as before."""
    if not _FROZEN:
        _FROZEN.append(True)
        gc.freeze()


# Series lengths from which the analysis loads numba (compiled_loops.COMPILED_MIN_POINTS) and,
# only where the compiled loops are not available, pandas (spike_score's rolling window,
# SPIKE_SCORE_WINDOW): both are imported on first use.
_NUMBA_FROM_POINTS = 200
_PANDAS_ABOVE_POINTS = 1000
_HEAVY_FROZEN: list[bool] = []


def _freeze_after_heavy_imports(run: Run) -> None:
    """A long run's analysis imports numba (and, only without it, pandas) on first use, after
    the freeze above, and the collector would walk their objects through the whole analysis (a
    1,000,000-scalar event file: ~20% slower than when pandas was imported before the freeze).
    Import them now and freeze again: once per process, after a collection, so only the run's
    own few objects stay."""
    from tscope.analyzers.detectors.compiled_loops import compiled_loops_available

    longest = max((run.series(metric)[0].size for metric in run.metric_names), default=0)
    compiled = compiled_loops_available()
    wanted = [
        name
        for name, needed in (
            ("numba", longest >= _NUMBA_FROM_POINTS),
            ("pandas", longest > _PANDAS_ABOVE_POINTS and not compiled),
        )
        if needed and name not in sys.modules
    ]
    if not wanted or _HEAVY_FROZEN:
        return
    _HEAVY_FROZEN.append(True)
    for name in wanted:
        if name == "numba":
            load_numba()  # None without the optional `fast` extra
            continue
        importlib.import_module(name)
    gc.collect()
    gc.freeze()


def analysis_of(inputs: Inputs, extra_findings: Sequence[Finding] = ()) -> Analysis:
    """The case of inputs already read (a replay reads them once and builds its case here)."""
    case = build_case(inputs.run, inputs.checkpoints, inputs.checkpoint_evidence, extra_findings)
    return Analysis(case, inputs.run)


def build_case(
    run: Run,
    checkpoints: list[CheckpointInfo],
    checkpoint_evidence: CheckpointEvidence | None = None,
    extra_findings: Sequence[Finding] = (),
) -> Case:
    """`extra_findings`: found by other components (a replay), ranked with the rest."""
    import numpy as np

    # A logged value near the float limit (1.7e308 is finite) overflows to inf in differences
    # and ratios, and inf - inf is NaN; the analyzers treat both as non-finite, so numpy's
    # warnings are only noise on stderr (two lines of source code under the one-line promise),
    # from the detectors to the story and the summary (red team, session 28).
    with np.errstate(all="ignore"):
        return _built_case(run, checkpoints, checkpoint_evidence, extra_findings)


def _built_case(
    run: Run,
    checkpoints: list[CheckpointInfo],
    checkpoint_evidence: CheckpointEvidence | None,
    extra_findings: Sequence[Finding],
) -> Case:
    from tscope.analyzers import Evidence, explain
    from tscope.analyzers.calibration import calibrate
    from tscope.analyzers.detect import detect
    from tscope.analyzers.incidents import incidents as find_incidents
    from tscope.analyzers.ranking import rank_findings
    from tscope.analyzers.story import build_story
    from tscope.analyzers.summary import alternatives, limits, summarize

    spikes, change_points = detect(run)
    evidence = Evidence(run, spikes, change_points, checkpoint_evidence)
    incidents = find_incidents(evidence)
    # The one place findings get their shipped confidence: the benchmark's measured right-rate
    # (analyzers/calibration.py), before ranking so the order compares rates.
    findings = rank_findings(calibrate(explain(evidence) + list(extra_findings)), incidents)
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
            summarize(evidence, incidents, findings, _readable(checkpoints, run.partial)),
            partial=bool(run.partial),
        ),
        chart_series={m: chart_series(run, m) for m in run.metric_names},
        tool_version=__version__,
    )
    if checkpoint_evidence is not None and not checkpoint_evidence.layers.empty:
        case.layers = layer_heatmap(checkpoint_evidence.layers)
        case.layers_table = checkpoint_evidence.layers
    return case


# The summary keys the typed case holds (the analyzers' summary dict may use no other).
SUMMARY_FIELDS = {summary_field.name for summary_field in fields(Summary)}


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


def _readable(
    checkpoints: list[CheckpointInfo], partial: Sequence[PartialInput]
) -> list[CheckpointInfo]:
    """The checkpoints the restart point may name: not a file tscope refused to read (a nanoGPT
    ckpt.pt holding a meta tensor was still the card's "restart from", red team session 27)."""
    refused = {entry.path for entry in partial}
    return [checkpoint for checkpoint in checkpoints if checkpoint.path not in refused]
