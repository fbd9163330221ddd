"""cluster.json read back, typed: what cluster.html, cluster.md and their charts print.

`ClusterReport.to_dict` (tscope.model.cluster) writes the JSON; `ClusterFile.from_dict` reads the
same shape back, whether just written or loaded by `tscope report` from an older tscope or edited
by hand: a missing field takes its default (the renderer words it as unknown), a field of the
wrong type is refused in one line (CaseFormatError). Numbers keep the type they were written with
(an int stays an int, so it prints as written); docs/cluster-schema.md describes every field.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tscope.model.case import Finding, read_finding
from tscope.model.case_fields import Fields
from tscope.model.cluster import CHART_MAX_RUNS


@dataclass(frozen=True)
class ClusterRunRow:
    """One entry of `runs`: the run's outcome and its first signal."""

    name: str
    status: str
    cluster: str | None
    explosion_step: float | None
    explosion_kind: str
    first_signal: str | None
    first_signal_step: float | None
    lead_steps: int | None
    final_loss: float | None
    case: str  # its case.json as the pipeline wrote it ("" when none)
    unread_files: int = 0  # files of the run that could not be read (its case lists them)


@dataclass(frozen=True)
class ChartedRun:
    """One entry of `chart.runs`: a run's bucketed loss (steps and values as written)."""

    name: str
    status: str
    cluster: str | None
    explosion_step: float | None
    baseline_loss: float | None
    steps: tuple[float | None, ...]
    values: tuple[float | None, ...]


@dataclass(frozen=True)
class TraitRow:
    field: str
    op: str
    value: Any
    text: str
    balanced_accuracy: float | None
    member_values: tuple[Any, ...]
    stable_values: tuple[Any, ...]


@dataclass(frozen=True)
class SignalRow:
    kind: str
    runs: float | None  # members with it
    median_offset_steps: int | None  # relative to the explosion; negative is before


@dataclass(frozen=True)
class CounterexampleRow:
    run: str
    stable_run: str
    config_distance: int | None
    config_diff: tuple[tuple[str, Any, Any], ...]  # (field, run value, stable value)


@dataclass(frozen=True)
class LossBandRow:
    """The members' loss ÷ baseline aligned on the explosion: per step offset the quartiles."""

    steps: tuple[float | None, ...]
    median: tuple[float | None, ...]
    lower: tuple[float | None, ...]
    upper: tuple[float | None, ...]


@dataclass(frozen=True)
class ClusterRow:
    id: str
    label: str
    runs: tuple[str, ...]
    failure_mode: str
    traits: tuple[TraitRow, ...]
    typical_lead_steps: int | None
    warned_runs: int | None
    signal_detail: tuple[SignalRow, ...]
    counterexample: CounterexampleRow | None
    loss_band: LossBandRow | None


@dataclass(frozen=True)
class AlignedSpikeRow:
    first_step: float | None
    last_step: float | None
    runs: tuple[str, ...]
    peak_steps: tuple[float | None, ...]
    runs_compared: int | None
    p_value: float | None
    shared_data_order: str
    data_order_evidence: str


@dataclass(frozen=True)
class SkippedRun:
    run: str
    problem: str


@dataclass(frozen=True)
class ClusterFile:
    schema_version: str
    tool_version: str
    runs_dir: str
    runs: tuple[ClusterRunRow, ...]
    clusters: tuple[ClusterRow, ...]
    aligned_spikes: tuple[AlignedSpikeRow, ...]
    findings: tuple[Finding, ...]
    skipped: tuple[SkippedRun, ...]
    limits: tuple[str, ...]
    verdict: str
    counts: dict[str, int]  # the summary's counts (runs, stable, unstable, clusters, …)
    method: dict[str, Any]
    chart_runs: tuple[ChartedRun, ...]

    @classmethod
    def from_dict(cls, payload: object) -> ClusterFile:
        report = Fields(payload, "cluster")
        summary = report.part("summary")
        tool = report.part("tool")
        chart = report.part("chart")
        version = report.data.get("schema_version", "?")
        return cls(
            schema_version=str(version),
            tool_version=str(tool.data.get("version", "?")),
            runs_dir=report.text("runs_dir"),
            runs=tuple(_run(run) for run in report.records("runs")),
            clusters=tuple(_cluster(item) for item in report.records("clusters")),
            aligned_spikes=tuple(_spike(spike) for spike in report.records("aligned_spikes")),
            findings=tuple(read_finding(item) for item in report.records("findings")),
            skipped=tuple(
                SkippedRun(item.text("run"), item.text("problem"))
                for item in report.records("skipped")
            ),
            limits=tuple(report.texts("limits")),
            verdict=summary.text("verdict"),
            counts={
                key: value
                for key, value in summary.data.items()
                if isinstance(value, int) and not isinstance(value, bool)
            },
            method=report.mapping("method"),
            # The runs a chart draws (CHART_MAX_RUNS, as analysis bounds them): a crafted
            # cluster.json of 2,000 charted runs × 2,000 points took 1.2 GB as typed tuples.
            chart_runs=tuple(_charted(run) for run in chart.records("runs")[:CHART_MAX_RUNS]),
        )


def _run(run: Fields) -> ClusterRunRow:
    return ClusterRunRow(
        name=run.text("name"),
        status=run.text("status"),
        cluster=run.optional_text("cluster"),
        explosion_step=run.optional_number("explosion_step"),
        explosion_kind=run.text("explosion_kind"),
        first_signal=run.optional_text("first_signal"),
        first_signal_step=run.optional_number("first_signal_step"),
        lead_steps=run.optional_integer("lead_steps"),
        final_loss=run.optional_number("final_loss"),
        case=run.text("case"),
        unread_files=max(run.optional_integer("unread_files") or 0, 0),
    )


def _charted(run: Fields) -> ChartedRun:
    return ChartedRun(
        name=run.text("name"),
        status=run.text("status"),
        cluster=run.optional_text("cluster"),
        explosion_step=run.optional_number("explosion_step"),
        baseline_loss=run.optional_number("baseline_loss"),
        steps=tuple(run.numbers("steps")),
        values=tuple(run.numbers("values")),
    )


def _cluster(cluster: Fields) -> ClusterRow:
    band = cluster.child("loss_band")
    counter = cluster.child("counterexample")
    return ClusterRow(
        id=cluster.text("id"),
        label=cluster.text("label"),
        runs=tuple(cluster.texts("runs")),
        failure_mode=cluster.text("failure_mode"),
        traits=tuple(
            TraitRow(
                field=trait.text("field"),
                op=trait.text("op"),
                value=trait.data.get("value"),
                text=trait.text("text"),
                balanced_accuracy=trait.optional_number("balanced_accuracy"),
                member_values=tuple(trait.items("member_values")),
                stable_values=tuple(trait.items("stable_values")),
            )
            for trait in cluster.records("discriminant_traits")
        ),
        typical_lead_steps=cluster.optional_integer("typical_lead_steps"),
        warned_runs=cluster.optional_integer("warned_runs"),
        signal_detail=tuple(
            SignalRow(
                kind=signal.text("kind"),
                runs=signal.optional_number("runs"),
                median_offset_steps=signal.optional_integer("median_offset_steps"),
            )
            for signal in cluster.records("signal_detail")
        ),
        counterexample=None
        if counter is None
        else CounterexampleRow(
            run=counter.text("run"),
            stable_run=counter.text("stable_run"),
            config_distance=counter.optional_integer("config_distance"),
            config_diff=tuple(
                (row.text("field"), row.data.get("run_value"), row.data.get("stable_value"))
                for row in counter.records("config_diff")
            ),
        ),
        loss_band=None
        if band is None
        else LossBandRow(
            steps=tuple(band.numbers("steps")),
            median=tuple(band.numbers("median")),
            lower=tuple(band.numbers("lower")),
            upper=tuple(band.numbers("upper")),
        ),
    )


def _spike(spike: Fields) -> AlignedSpikeRow:
    return AlignedSpikeRow(
        first_step=spike.optional_number("first_step"),
        last_step=spike.optional_number("last_step"),
        runs=tuple(spike.texts("runs")),
        peak_steps=tuple(spike.numbers("peak_steps")),
        runs_compared=spike.optional_integer("runs_compared"),
        p_value=spike.optional_number("p_value"),
        shared_data_order=spike.text("shared_data_order", "unknown"),
        data_order_evidence=spike.text("data_order_evidence"),
    )
