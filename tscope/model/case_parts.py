"""The case's header and verdict sections, typed: run, summary (with its incident card and the
loss impact), and the per-layer heat map. Each reads itself from case.json (`from_fields`) and
writes the same JSON shape back (`to_dict`); docs/case-schema.md describes the fields."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from tscope.model.case_fields import Fields
from tscope.model.run import Source


@dataclass(frozen=True)
class RunHeader:
    """Which run the case is about: its name, where it was read, which files, which steps."""

    name: str
    path: str
    sources: tuple[Source, ...] = ()
    first_step: int | None = None
    last_step: int | None = None
    config: dict[str, Any] = field(default_factory=dict)  # as the run logged it

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "path": self.path,
            "sources": [{"kind": s.kind, "path": s.path} for s in self.sources],
            "first_step": self.first_step,
            "last_step": self.last_step,
            "config": self.config,
        }

    @classmethod
    def from_fields(cls, run: Fields) -> RunHeader:
        return cls(
            name=run.text("name"),
            path=run.text("path"),
            sources=tuple(Source(s.text("kind"), s.text("path")) for s in run.records("sources")),
            first_step=run.optional_integer("first_step"),
            last_step=run.optional_integer("last_step"),
            config=run.mapping("config"),
        )


@dataclass(frozen=True)
class RestartPoint:
    """The checkpoint to restart from, and the producer's resume command (None: unknown)."""

    path: str
    step: int | None
    has_optimizer: bool
    command: str | None

    @classmethod
    def from_fields(cls, restart: Fields) -> RestartPoint:
        return cls(
            path=restart.text("path"),
            step=restart.optional_integer("step"),
            has_optimizer=restart.flag("has_optimizer"),
            command=restart.optional_text("command"),
        )


@dataclass(frozen=True)
class CardCause:
    category: str
    words: str  # the category in an engineer's words
    finding_id: str | None  # the finding behind the explanation; None when it was inferred
    confidence: float


@dataclass(frozen=True)
class IncidentCard:
    """The first screen of an incident: what, when, why, how sure, where to restart."""

    what: str
    step: int | None
    severity: str
    headline_id: str
    cause: CardCause
    restart: RestartPoint | None

    def to_dict(self) -> dict[str, Any]:
        restart = self.restart
        return {
            "what": self.what,
            "step": self.step,
            "severity": self.severity,
            "headline_id": self.headline_id,
            "cause": {
                "category": self.cause.category,
                "words": self.cause.words,
                "finding_id": self.cause.finding_id,
                "confidence": self.cause.confidence,
            },
            "restart": None
            if restart is None
            else {
                "path": restart.path,
                "step": restart.step,
                "has_optimizer": restart.has_optimizer,
                "command": restart.command,
            },
        }

    @classmethod
    def from_fields(cls, card: Fields) -> IncidentCard:
        cause = card.part("cause")
        restart = card.child("restart")
        return cls(
            what=card.text("what"),
            step=card.optional_integer("step"),
            severity=card.text("severity"),
            headline_id=card.text("headline_id"),
            cause=CardCause(
                category=cause.text("category"),
                words=cause.text("words"),
                finding_id=cause.optional_text("finding_id"),
                confidence=cause.number("confidence"),
            ),
            restart=None if restart is None else RestartPoint.from_fields(restart),
        )


@dataclass(frozen=True)
class LossImpact:
    """What the headline incident cost the loss (tscope.analyzers.impact, as written)."""

    baseline: float
    peak: float
    excess_nats: float
    ratio: float
    duration_steps: int
    points: int
    area_nats_steps: float
    recovered: bool
    nonfinite: bool
    returned_to_initial: bool
    severity: str

    def to_dict(self) -> dict[str, Any]:
        return dict(self.__dict__)

    @classmethod
    def from_fields(cls, impact: Fields) -> LossImpact:
        return cls(
            baseline=impact.number("baseline"),
            peak=impact.number("peak"),
            excess_nats=impact.number("excess_nats"),
            ratio=impact.number("ratio"),
            duration_steps=impact.integer("duration_steps"),
            points=impact.integer("points"),
            area_nats_steps=impact.number("area_nats_steps"),
            recovered=impact.flag("recovered"),
            nonfinite=impact.flag("nonfinite"),
            returned_to_initial=impact.flag("returned_to_initial"),
            severity=impact.text("severity"),
        )


@dataclass(frozen=True)
class Summary:
    """The verdict: status ("incident", "healthy", "insufficient_data", "no_data"), one sentence,
    the next steps; an incident adds its card and impact, too little data says what is missing."""

    status: str = "no_data"
    verdict: str = ""
    next_steps: tuple[str, ...] = ()
    headline_finding: str | None = None  # the id of the finding the verdict is about
    missing: tuple[str, ...] | None = None  # insufficient_data: what the run did not log
    card: IncidentCard | None = None
    impact: LossImpact | None = None
    partial: bool = False  # some input could not be read (the case says which)

    def to_dict(self) -> dict[str, Any]:
        payload: dict[str, Any] = {
            "status": self.status,
            "verdict": self.verdict,
            "next_steps": list(self.next_steps),
            "headline_finding": self.headline_finding,
        }
        if self.missing is not None:
            payload["missing"] = list(self.missing)
        if self.card is not None:
            payload["card"] = self.card.to_dict()
        if self.impact is not None:
            payload["impact"] = self.impact.to_dict()
        if self.partial:
            payload["partial"] = True
        return payload

    @classmethod
    def from_fields(cls, summary: Fields) -> Summary:
        card = summary.child("card")
        impact = summary.child("impact")
        return cls(
            status=summary.text("status", "no_data"),
            verdict=summary.text("verdict"),
            next_steps=tuple(summary.texts("next_steps")),
            headline_finding=summary.optional_text("headline_finding"),
            missing=tuple(summary.texts("missing")) if summary.has("missing") else None,
            card=None if card is None else IncidentCard.from_fields(card),
            impact=None if impact is None else LossImpact.from_fields(impact),
            partial=summary.flag("partial"),
        )


# Charts keep at most this many buckets per series; each bucket keeps its last value and its
# min/max, so a one-step spike in a 10^6-step run still shows at full height (tscope.chart_data).
# A re-rendered case.json is read to the same bound (case._chart_series).
CHART_BUCKETS = 1200


def charted_points(points: list[Any]) -> list[Any]:
    """A chart list as analysis bounds it (CHART_BUCKETS, every k-th kept): a crafted case.json
    whose loss series held 1,000,000 points (13 MB) took 0.8 GB to re-render. Lists tscope
    wrote are within the bound and kept as written."""
    if len(points) <= CHART_BUCKETS:
        return points
    return points[:: -(-len(points) // CHART_BUCKETS)]


# Heat-map size: the layers with the largest peak update ratio (a report is read in a minute);
# a re-rendered case.json is drawn to the same bound.
HEATMAP_MAX_LAYERS = 40


@dataclass(frozen=True)
class LayerHeatmap:
    """names × checkpoint steps matrices of the per-step update ratio and norm growth; None
    where a layer was not measured at a step."""

    steps: tuple[int, ...]
    names: tuple[str, ...]
    update_ratio: tuple[tuple[float | None, ...], ...]  # (names, steps)
    norm_growth: tuple[tuple[float | None, ...], ...]  # (names, steps)

    def measure(self, key: str) -> tuple[tuple[float | None, ...], ...]:
        """The matrix of one measure by its case.json key ("update_ratio", "norm_growth")."""
        matrices = {"update_ratio": self.update_ratio, "norm_growth": self.norm_growth}
        return matrices[key]

    def to_dict(self) -> dict[str, Any]:
        return {
            "steps": list(self.steps),
            "names": list(self.names),
            "update_ratio": [list(row) for row in self.update_ratio],
            "norm_growth": [list(row) for row in self.norm_growth],
        }

    @classmethod
    def from_fields(cls, layers: Fields) -> LayerHeatmap:
        return cls(
            steps=tuple(layers.integers("steps")),
            names=tuple(layers.texts("names")),
            update_ratio=tuple(tuple(row) for row in layers.matrix("update_ratio")),
            norm_growth=tuple(tuple(row) for row in layers.matrix("norm_growth")),
        )
