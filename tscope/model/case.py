"""The case file: what happened, when, where, why — the model behind case.json/html/md."""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field
from typing import Any

from tscope.model.case_fields import CaseFormatError, Fields
from tscope.model.case_parts import LayerHeatmap, RunHeader, Summary, charted_points
from tscope.model.categories import SEVERITIES, SOURCES
from tscope.model.json_floats import rounded_floats
from tscope.model.metric_names import MAX_METRIC_NAME_CHARS
from tscope.model.replay_section import ReplaySection
from tscope.model.run import Caveat, PartialInput, RunEvent
from tscope.model.xray_section import XraySection

# The case.json schema this tscope writes and reads. A file of another major version is refused
# (`Case.from_dict`); within one major version later fields are optional, so older files still read.
SCHEMA_VERSION = "1"


@dataclass(frozen=True)
class Spike:
    """One incident on one series: alarms of several detectors merged into onset/peak/end."""

    id: str
    metric: str
    onset_step: int
    peak_step: int
    end_step: int | None  # first step back within the baseline band; None if it never recovered
    magnitude: float  # (peak - baseline median) / (1.4826 * MAD of the baseline), robust sigma
    detectors: tuple[str, ...]
    baseline: float  # median of the pre-spike window
    peak_value: float
    nonfinite: bool = False
    # The score a detector compared with its threshold (robust σ for robust_z, σ for spike_score):
    # what the report prints beside "≥ 6 robust σ". None when only NaN/Inf points alarmed.
    alarm_score: float | None = None
    alarm_detector: str | None = None


@dataclass(frozen=True)
class ChangePoint:
    metric: str
    step: int  # first step of the new regime
    detector: str
    before_mean: float
    after_mean: float


@dataclass(frozen=True)
class Finding:
    category: str
    severity: str  # one of SEVERITIES
    confidence: float  # [0, 1]
    step: int | None
    layer: str | None
    message: str
    evidence: dict[str, Any]
    suggestion: str
    source: str = "logs"
    spike_id: str | None = None
    # Extensions beyond the contract: what threshold was crossed and where it comes from.
    threshold: str = ""
    id: str = ""  # assigned after ranking: F1 is the best explanation
    # The rule's own confidence before calibration (analyzers/calibration.py replaces
    # `confidence` with the benchmark's measured right-rate); None on findings never calibrated.
    rule_confidence: float | None = None

    def __post_init__(self) -> None:
        if self.severity not in SEVERITIES:
            raise ValueError(f"severity must be one of {SEVERITIES}, got {self.severity!r}")
        if not 0.0 <= self.confidence <= 1.0:
            raise ValueError(f"confidence must be in [0, 1], got {self.confidence}")
        if self.source not in SOURCES:
            raise ValueError(f"source must be one of {SOURCES}, got {self.source!r}")


@dataclass(frozen=True)
class StoryEvent:
    step: int
    signal: str  # "learning_rate", "grad_norm", "loss", "nonfinite", "resume", "loss_scale"
    description: str
    layer: str | None = None
    spike_id: str | None = None
    lead_steps: int | None = None  # steps before the spike's peak; positive = earlier


@dataclass(frozen=True)
class CheckpointInfo:
    step: int | None
    path: str
    format: str
    has_optimizer: bool
    has_rng: bool


@dataclass(frozen=True)
class Alternative:
    """An explanation the evidence argues against, and why (an expert trusts what was ruled out)."""

    category: str
    reason: str
    spike_id: str | None = None


@dataclass
class Case:
    run: RunHeader
    metrics: list[str]
    spikes: list[Spike] = field(default_factory=list)
    change_points: list[ChangePoint] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    story: list[StoryEvent] = field(default_factory=list)
    checkpoints: list[CheckpointInfo] = field(default_factory=list)
    partial: list[PartialInput] = field(default_factory=list)
    alternatives: list[Alternative] = field(default_factory=list)
    limits: list[str] = field(default_factory=list)  # what the evidence cannot show
    caveats: list[Caveat] = field(default_factory=list)
    events: list[RunEvent] = field(default_factory=list)  # case.json keeps all but `numbers`
    summary: Summary = field(default_factory=Summary)
    # Chart data, bucketed with min/max kept so a re-render needs no recomputation.
    chart_series: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    tool_version: str = "0"
    # Per-layer view for the report (names × checkpoint steps), and the full table behind it,
    # which is written as layers.parquet (not part of case.json).
    layers: LayerHeatmap | None = None
    layers_table: Any = None
    # What `tscope replay` added: fidelity, per-step series, samples, what-ifs (see docs).
    replay: ReplaySection | None = None
    # What `tscope xray` added: per-token weights, matched rule, leak matrix (docs/xray-schema.md).
    xray: XraySection | None = None
    schema_version: str = SCHEMA_VERSION  # as read; a new case is written in this tscope's

    def to_dict(self) -> dict[str, Any]:
        """The case.json payload: contract keys plus documented extensions, JSON-safe floats.
        The one place a case becomes JSON-shaped."""
        payload: dict[str, Any] = {
            "schema_version": self.schema_version,
            "tool": {"name": "tscope", "version": self.tool_version},
            "run": self.run.to_dict(),
            "metrics": list(self.metrics),
            "spikes": [_spike_dict(spike) for spike in self.spikes],
            "change_points": [
                {
                    "metric": cp.metric,
                    "step": cp.step,
                    "detector": cp.detector,
                    "before": {"mean": cp.before_mean},
                    "after": {"mean": cp.after_mean},
                }
                for cp in self.change_points
            ],
            "findings": [finding_dict(finding) for finding in self.findings],
            "story": [asdict(event) for event in self.story],
            "checkpoints": [asdict(ckpt) for ckpt in self.checkpoints],
            "partial": [{"path": p.path, "problem": p.problem} for p in self.partial],
            "alternatives": [asdict(alt) for alt in self.alternatives],
            "limits": list(self.limits),
            "caveats": [
                {"kind": c.kind, "message": c.message, "source": c.source} for c in self.caveats
            ],
            "events": [
                {"kind": e.kind, "step": e.step, "detail": e.detail, "source": e.source}
                for e in self.events
            ],
            "summary": self.summary.to_dict(),
            "chart_series": self.chart_series,
        }
        if self.layers is not None:
            payload["layers"] = self.layers.to_dict()
        if self.replay is not None:
            payload["replay"] = self.replay.to_dict()
        if self.xray is not None:
            payload["xray"] = self.xray.to_dict()
        result: dict[str, Any] = json_safe(payload)
        return result

    @classmethod
    def from_dict(cls, payload: object) -> Case:
        """A case read back from its case.json payload (what `tscope report` and the cluster
        cache render). Refuses another major schema version and any field of the wrong type
        (CaseFormatError, one line); a later optional field an older file lacks takes its default.
        """
        case = Fields(payload, "case")
        version = case.data.get("schema_version")
        if not isinstance(version, str | int) or isinstance(version, bool):
            raise CaseFormatError("not a tscope case file (no schema_version)")
        if str(version).split(".")[0] != SCHEMA_VERSION.split(".")[0]:
            raise CaseFormatError(
                f"case schema {version} is not schema {SCHEMA_VERSION}, the one this tscope reads"
            )
        tool = case.part("tool")
        layers = case.child("layers")
        summary = case.child("summary")
        return cls(
            run=RunHeader.from_fields(case.part("run")),
            metrics=case.texts("metrics"),
            spikes=[_spike(item) for item in case.records("spikes")],
            change_points=[_change_point(item) for item in case.records("change_points")],
            findings=[read_finding(item) for item in case.records("findings")],
            story=[_story_event(item) for item in case.records("story")],
            checkpoints=[_checkpoint(item) for item in case.records("checkpoints")],
            partial=[
                PartialInput(p.text("path"), p.text("problem")) for p in case.records("partial")
            ],
            alternatives=[
                Alternative(a.text("category"), a.text("reason"), a.optional_text("spike_id"))
                for a in case.records("alternatives")
            ],
            limits=case.texts("limits"),
            caveats=[
                Caveat(c.text("kind"), c.text("message"), c.text("source"))
                for c in case.records("caveats")
            ],
            events=[
                RunEvent(e.text("kind"), e.integer("step"), e.text("detail"), e.text("source"))
                for e in case.records("events")
            ],
            summary=Summary() if summary is None else Summary.from_fields(summary),
            chart_series=_chart_series(case),
            tool_version=tool.text("version", "?"),
            layers=None if layers is None else LayerHeatmap.from_fields(layers),
            replay=ReplaySection.from_dict(case.data["replay"]) if case.has("replay") else None,
            xray=XraySection.from_dict(case.data["xray"]) if case.has("xray") else None,
            schema_version=str(version),
        )


def _spike(spike: Fields) -> Spike:
    return Spike(
        id=spike.text("id"),
        metric=spike.text("metric"),
        onset_step=spike.integer("onset_step"),
        peak_step=spike.integer("peak_step"),
        end_step=spike.optional_integer("end_step"),
        magnitude=spike.number("magnitude"),
        detectors=tuple(spike.texts("detectors")),
        baseline=spike.number("baseline"),
        peak_value=spike.number("peak_value"),
        nonfinite=spike.flag("nonfinite"),
        alarm_score=spike.optional_number("alarm_score"),
        alarm_detector=spike.optional_text("alarm_detector"),
    )


def _change_point(change: Fields) -> ChangePoint:
    before = change.part("before")
    after = change.part("after")
    return ChangePoint(
        metric=change.text("metric"),
        step=change.integer("step"),
        detector=change.text("detector"),
        before_mean=before.number("mean", float("nan")),
        after_mean=after.number("mean", float("nan")),
    )


def finding_dict(finding: Finding) -> dict[str, Any]:
    """A finding as case.json holds it: `rule_confidence` only where a calibration set it."""
    data = asdict(finding)
    if finding.rule_confidence is None:
        del data["rule_confidence"]
    return data


def read_finding(finding: Fields) -> Finding:
    """A finding of a case or cluster file; Finding's own checks refused in one line."""
    try:
        return Finding(
            category=finding.text("category"),
            severity=finding.text("severity", "info"),
            confidence=finding.number("confidence"),
            step=finding.optional_integer("step"),
            layer=finding.optional_text("layer"),
            message=finding.text("message"),
            evidence=finding.mapping("evidence"),
            suggestion=finding.text("suggestion"),
            source=finding.text("source", "logs"),
            spike_id=finding.optional_text("spike_id"),
            threshold=finding.text("threshold"),
            id=finding.text("id"),
            rule_confidence=finding.optional_number("rule_confidence"),
        )
    except CaseFormatError:
        raise
    except ValueError as error:  # Finding's own checks: severity, confidence, source
        raise CaseFormatError(f"{finding.where}: {error}") from error


def _story_event(event: Fields) -> StoryEvent:
    return StoryEvent(
        step=event.integer("step"),
        signal=event.text("signal"),
        description=event.text("description"),
        layer=event.optional_text("layer"),
        spike_id=event.optional_text("spike_id"),
        lead_steps=event.optional_integer("lead_steps"),
    )


def _checkpoint(checkpoint: Fields) -> CheckpointInfo:
    return CheckpointInfo(
        step=checkpoint.optional_integer("step"),
        path=checkpoint.text("path"),
        format=checkpoint.text("format"),
        has_optimizer=checkpoint.flag("has_optimizer"),
        has_rng=checkpoint.flag("has_rng"),
    )


def _chart_series(case: Fields) -> dict[str, dict[str, list[Any]]]:
    """Per metric its bucketed lists (steps, values, min, max), kept as written."""
    charted: dict[str, dict[str, list[Any]]] = {}
    for name, lists in case.mapping("chart_series").items():
        if len(name) > MAX_METRIC_NAME_CHARS:  # repeated per chart point: 500x the bytes
            raise CaseFormatError(
                f"case.chart_series holds a series name of {len(name)} characters; tscope "
                f"writes at most {MAX_METRIC_NAME_CHARS}"
            )
        entry = Fields(lists, f"case.chart_series.{name[:80]}")
        charted[name] = {key: charted_points(entry.items(key)) for key in entry.data}
    return charted


def _spike_dict(spike: Spike) -> dict[str, Any]:
    data = asdict(spike)
    data["detectors"] = list(spike.detectors)
    return data


def json_safe(value: Any) -> Any:
    """Round floats to a stable precision and turn NaN/Inf into strings JSON can hold."""
    kind = type(value)  # exact-type fast paths: case files hold ~10^5 chart floats
    if kind is float:
        return _json_float(value)
    if kind is int:
        return value if _INT64_LOW <= value <= _INT64_HIGH else _beyond_int64(value)
    if kind is str or kind is bool or value is None:
        return value
    if kind is list or kind is tuple:
        # A chart's list of floats (~11,000 of them in a 10,000-step run's case) rounded by
        # numpy at once, the same numbers (json_floats.py); other lists item by item.
        if len(value) >= VECTOR_ROUNDING_MIN_ITEMS and all(type(item) is float for item in value):
            rounded = rounded_floats(list(value))
            if rounded is not None:
                return rounded
        # A finite float item inline: the same rounding as _json_float without two function
        # calls per item, ~3x faster than calling it.
        return [
            float(f"{item:.6g}") if type(item) is float and -_INF < item < _INF else json_safe(item)
            for item in value
        ]
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return json_safe(int(value))
    if isinstance(value, numbers.Real):
        return _json_float(float(value))
    return value


_INF = math.inf
# case.json holds int64 integers only: `tscope report` refuses anything wider as not written by
# tscope, so a wider one from an input (a 4,000-digit integer in a meta.json) is written the way
# tscope.model.json_parse reads one, as a float (inf beyond float range).
_INT64_LOW, _INT64_HIGH = -(2**63), 2**63 - 1


def _beyond_int64(value: int) -> Any:
    try:
        return _json_float(float(value))
    except OverflowError:
        return _json_float(_INF if value > 0 else -_INF)


# Below this many items a list is rounded item by item: numpy's fixed cost per call (~20 µs)
# outweighs the ~0.3 µs it saves per float.
VECTOR_ROUNDING_MIN_ITEMS = 128


def _json_float(number: float) -> float | str:
    if math.isnan(number):
        return "nan"
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    return float(f"{number:.6g}")
