"""The case file: what happened, when, where, why — the model behind case.json/html/md."""

from __future__ import annotations

import math
import numbers
from dataclasses import asdict, dataclass, field
from typing import Any

from tscope.model.categories import SEVERITIES

SCHEMA_VERSION = "1"
SOURCES = ("logs", "checkpoints", "replay", "cluster", "xray")


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
    run: dict[str, Any]
    metrics: list[str]
    spikes: list[Spike] = field(default_factory=list)
    change_points: list[ChangePoint] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    story: list[StoryEvent] = field(default_factory=list)
    checkpoints: list[CheckpointInfo] = field(default_factory=list)
    partial: list[dict[str, str]] = field(default_factory=list)
    alternatives: list[Alternative] = field(default_factory=list)
    limits: list[str] = field(default_factory=list)  # what the evidence cannot show
    caveats: list[dict[str, str]] = field(default_factory=list)
    events: list[dict[str, Any]] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)  # verdict, next_steps
    # Chart data, bucketed with min/max kept so a re-render needs no recomputation.
    chart_series: dict[str, dict[str, list[Any]]] = field(default_factory=dict)
    tool_version: str = "0"
    # Per-layer view for the report (names × checkpoint steps), and the full table behind it,
    # which is written as layers.parquet (not part of case.json).
    layers: dict[str, Any] | None = None
    layers_table: Any = None
    # What `tscope replay` added: fidelity, per-step series, samples, what-ifs (see docs).
    replay: dict[str, Any] | None = None
    # What `tscope xray` added: per-token weights, matched rule, leak matrix (docs/xray-schema.md).
    xray: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        """The case.json payload: contract keys plus documented extensions, JSON-safe floats."""
        payload: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "tscope", "version": self.tool_version},
            "run": self.run,
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
            "findings": [asdict(finding) for finding in self.findings],
            "story": [asdict(event) for event in self.story],
            "checkpoints": [asdict(ckpt) for ckpt in self.checkpoints],
            "partial": list(self.partial),
            "alternatives": [asdict(alt) for alt in self.alternatives],
            "limits": list(self.limits),
            "caveats": list(self.caveats),
            "events": list(self.events),
            "summary": self.summary,
            "chart_series": self.chart_series,
        }
        if self.layers is not None:
            payload["layers"] = self.layers
        if self.replay is not None:
            payload["replay"] = self.replay
        if self.xray is not None:
            payload["xray"] = self.xray
        result: dict[str, Any] = json_safe(payload)
        return result


def _spike_dict(spike: Spike) -> dict[str, Any]:
    data = asdict(spike)
    data["detectors"] = list(spike.detectors)
    return data


def json_safe(value: Any) -> Any:
    """Round floats to a stable precision and turn NaN/Inf into strings JSON can hold."""
    kind = type(value)  # exact-type fast paths: case files hold ~10^5 chart floats
    if kind is float:
        return _json_float(value)
    if kind is str or kind is int or kind is bool or value is None:
        return value
    if kind is list or kind is tuple:
        return [json_safe(item) for item in value]
    if isinstance(value, dict):
        return {str(key): json_safe(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [json_safe(item) for item in value]
    if isinstance(value, (bool, str)):
        return value
    if isinstance(value, numbers.Integral):
        return int(value)
    if isinstance(value, numbers.Real):
        return _json_float(float(value))
    return value


def _json_float(number: float) -> float | str:
    if math.isnan(number):
        return "nan"
    if math.isinf(number):
        return "inf" if number > 0 else "-inf"
    return float(f"{number:.6g}")
