"""The cluster report: which runs of a sweep blew up, what they share, what the stable ones do not.

`RunProfile` is one run as the cluster analysis sees it (built from the run's case and its loss
series); `ClusterReport` is what cluster.json/html/md hold. The JSON keys of the contract
(../shared/spec/CONTRACT.md) are written by `ClusterReport.to_dict`; docs/cluster-schema.md
documents every field.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from tscope.model.case import SCHEMA_VERSION, Finding, finding_dict, json_safe

STATUSES = ("stable", "unstable")
# The report's chart draws at most this many runs (unstable first), each as at most this many
# bucket maxima (the maximum keeps a one-step spike visible).
CHART_MAX_RUNS = 60
CHART_MAX_UNSTABLE = 40
CHART_POINTS = 300


@dataclass(frozen=True)
class Signal:
    """One early-warning signal of one run: what fired, at which step."""

    kind: str  # a finding category ("lr_too_high") or a detector alarm ("grad_norm_alarm")
    step: int
    severity: str  # the severity of the finding behind it; detector alarms are "warning"
    description: str


@dataclass(frozen=True)
class LossCurve:
    """A run's training loss at full resolution (the clustering needs steps, not chart buckets)."""

    steps: np.ndarray  # (n,) int64, increasing
    values: np.ndarray  # (n,) float64, NaN/Inf kept


@dataclass(frozen=True)
class RunProfile:
    name: str
    path: str
    status: str  # one of STATUSES
    loss: LossCurve
    baseline_loss: float | None  # median of the first logged losses (the run's own start)
    explosion_step: int | None  # first step of the blow-up; None for stable runs
    explosion_kind: str | None  # how it started: "nonfinite" | "above_baseline" | "divergence"
    failure_mode: str | None  # how it ended: "blowup" | "recovered" | "divergence"
    final_loss: float | None  # last finite logged loss
    signals: tuple[Signal, ...]  # every signal of the run, in step order
    config: dict[str, Any]  # flattened `field: value`
    verdict: str = ""
    # The run's own case status (case.json summary.status): "incident", "healthy" or
    # "insufficient_data". A stable run (it did not blow up) can still have had an incident.
    case_status: str = ""
    case_path: str = ""
    reused_case: bool = False
    # Files of the run that could not be read (its case.json's `partial`): the run's verdict
    # rests on the rest, which the sweep's report says beside its status.
    unread_files: int = 0
    # (steps, robust z-scores) of the loss before the explosion: the aligned-spike screen
    # (analyzers/cluster/aligned.py), computed where the profile is built (in the worker that
    # analyzed the run, not one run after another at the end); None: computed when needed.
    loss_zscores: tuple[np.ndarray, np.ndarray] | None = field(
        default=None, compare=False, repr=False
    )

    @property
    def early_signals(self) -> tuple[Signal, ...]:
        """Signals at or before the explosion (all signals of a stable run)."""
        if self.explosion_step is None:
            return self.signals
        return tuple(s for s in self.signals if s.step <= self.explosion_step)

    @property
    def first_signal(self) -> Signal | None:
        early = self.early_signals if self.status == "unstable" else ()
        return early[0] if early else None

    @property
    def lead_steps(self) -> int | None:
        first = self.first_signal
        if first is None or self.explosion_step is None:
            return None
        return self.explosion_step - first.step


@dataclass(frozen=True)
class Trait:
    """A config field (or numeric threshold) that separates a cluster from the stable runs."""

    field: str
    op: str  # ">=", "<=", "=="
    value: Any
    balanced_accuracy: float  # (share of members matching + share of stable runs not matching)/2
    member_values: tuple[Any, ...]
    stable_values: tuple[Any, ...]

    @property
    def text(self) -> str:
        symbol = {">=": "≥", "<=": "≤", "==": "="}[self.op]
        return f"{self.field} {symbol} {_short(self.value)}"


@dataclass(frozen=True)
class LossBand:
    """Members aligned on their explosion step, loss divided by each run's own early baseline."""

    offsets: tuple[int, ...]  # steps relative to the explosion step
    median: tuple[float, ...]
    lower: tuple[float, ...]  # 25th percentile
    upper: tuple[float, ...]  # 75th percentile
    runs_per_point: tuple[int, ...]


@dataclass(frozen=True)
class Counterexample:
    run: str
    stable_run: str
    config_distance: int  # number of fields that differ (identifiers and outcomes excluded)
    config_diff: tuple[tuple[str, Any, Any], ...]  # (field, run value, stable value)


@dataclass(frozen=True)
class RunCluster:
    id: str
    label: str
    members: tuple[str, ...]
    failure_mode: str
    signals: tuple[tuple[str, int, int], ...]  # (kind, members with it, median step offset)
    typical_lead_steps: int | None
    warned_members: int  # members with a signal at or before their explosion
    traits: tuple[Trait, ...]
    band: LossBand | None
    counterexample: Counterexample | None


@dataclass(frozen=True)
class AlignedSpike:
    """Loss spikes at the same step in several runs (more than chance allows)."""

    first_step: int
    last_step: int
    runs: tuple[str, ...]
    peak_steps: tuple[int, ...]  # per run, in the order of `runs`
    runs_compared: int  # runs that logged these steps
    p_value: float  # chance of this many coincident alarms under independence
    shared_data_order: str  # "yes" | "no" | "unknown", from the runs' configs
    data_order_evidence: str


@dataclass
class ClusterReport:
    runs_dir: str
    profiles: list[RunProfile]
    clusters: list[RunCluster] = field(default_factory=list)
    aligned_spikes: list[AlignedSpike] = field(default_factory=list)
    findings: list[Finding] = field(default_factory=list)
    skipped: list[dict[str, str]] = field(default_factory=list)  # runs that could not be read
    limits: list[str] = field(default_factory=list)
    summary: dict[str, Any] = field(default_factory=dict)  # verdict and counts
    method: dict[str, Any] = field(default_factory=dict)
    tool_version: str = "0"

    def cluster_of(self, run_name: str) -> str | None:
        for cluster in self.clusters:
            if run_name in cluster.members:
                return cluster.id
        return None

    def to_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "schema_version": SCHEMA_VERSION,
            "tool": {"name": "tscope", "version": self.tool_version},
            "runs_dir": self.runs_dir,
            "runs": [self._run_dict(profile) for profile in self.profiles],
            "clusters": [_cluster_dict(cluster) for cluster in self.clusters],
            "aligned_spikes": [asdict(spike) for spike in self.aligned_spikes],
            "findings": [finding_dict(finding) for finding in self.findings],
            "skipped": list(self.skipped),
            "limits": list(self.limits),
            "summary": self.summary,
            "method": self.method,
            "chart": {"runs": [self._chart_run(p) for p in self._charted()]},
        }
        result: dict[str, Any] = json_safe(payload)
        return result

    def _charted(self) -> list[RunProfile]:
        unstable = [p for p in self.profiles if p.status == "unstable"][:CHART_MAX_UNSTABLE]
        stable = [p for p in self.profiles if p.status == "stable"]
        room = CHART_MAX_RUNS - len(unstable)
        if len(stable) > room:
            picks = np.linspace(0, len(stable) - 1, num=max(room, 0)).round().astype(int)
            stable = [stable[i] for i in sorted(set(picks.tolist()))]
        return unstable + stable

    def _chart_run(self, profile: RunProfile) -> dict[str, Any]:
        steps, values = profile.loss.steps, profile.loss.values
        if steps.size > CHART_POINTS:
            buckets = np.array_split(np.arange(steps.size), CHART_POINTS)
            steps = np.array([steps[b[-1]] for b in buckets])
            values = np.array([_bucket_max(values[b]) for b in buckets])
        return {
            "name": profile.name,
            "status": profile.status,
            "cluster": self.cluster_of(profile.name),
            "explosion_step": profile.explosion_step,
            "baseline_loss": profile.baseline_loss,
            "steps": steps.tolist(),
            "values": values.tolist(),
        }

    def _run_dict(self, profile: RunProfile) -> dict[str, Any]:
        first = profile.first_signal
        return {
            "name": profile.name,
            "path": profile.path,
            "status": profile.status,
            "first_signal": None if first is None else first.kind,
            "first_signal_step": None if first is None else first.step,
            "explosion_step": profile.explosion_step,
            "explosion_kind": profile.explosion_kind,
            "failure_mode": profile.failure_mode,
            "lead_steps": profile.lead_steps,
            "baseline_loss": profile.baseline_loss,
            "final_loss": profile.final_loss,
            "signals": [asdict(signal) for signal in profile.signals],
            "early_signals": [signal.kind for signal in profile.early_signals]
            if profile.status == "unstable"
            else [],
            "cluster": self.cluster_of(profile.name),
            "verdict": profile.verdict,
            "case_status": profile.case_status,
            "unread_files": profile.unread_files,
            "case": profile.case_path,
            "config": profile.config,
        }


def _cluster_dict(cluster: RunCluster) -> dict[str, Any]:
    band = cluster.band
    counter = cluster.counterexample
    return {
        "id": cluster.id,
        "label": cluster.label,
        "runs": list(cluster.members),
        "failure_mode": cluster.failure_mode,
        "signals": [kind for kind, _, _ in cluster.signals],
        "signal_detail": [
            {"kind": kind, "runs": count, "median_offset_steps": offset}
            for kind, count, offset in cluster.signals
        ],
        "typical_lead_steps": cluster.typical_lead_steps,
        "warned_runs": cluster.warned_members,
        "discriminant_traits": [
            {
                "field": trait.field,
                "value": trait.value,
                "op": trait.op,
                "text": trait.text,
                "balanced_accuracy": trait.balanced_accuracy,
                "member_values": list(trait.member_values),
                "stable_values": list(trait.stable_values),
            }
            for trait in cluster.traits
        ],
        "loss_band": None
        if band is None
        else {
            "aligned_on": "explosion_step",
            "normalized_by": "baseline_loss",
            "steps": list(band.offsets),
            "median": list(band.median),
            "lower": list(band.lower),
            "upper": list(band.upper),
            "runs_per_point": list(band.runs_per_point),
        },
        "counterexample": None
        if counter is None
        else {
            "run": counter.run,
            "stable_run": counter.stable_run,
            "config_distance": counter.config_distance,
            "config_diff": [
                {"field": name, "run_value": mine, "stable_value": theirs}
                for name, mine, theirs in counter.config_diff
            ],
        },
    }


def _bucket_max(values: np.ndarray) -> float:
    """The bucket's largest finite value, or its first non-finite one (a NaN must show)."""
    finite = values[np.isfinite(values)]
    if finite.size < values.size:
        return float(values[~np.isfinite(values)][0])
    return float(finite.max())


def _short(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)
