"""The case's `xray` section, typed: what case.json keeps of a `tscope xray` (xray.json has the
per-rule expectations too). `of(result)` makes it from the audit, `from_dict` reads it back from
case.json and `to_dict` writes the same shape; docs/xray-schema.md describes the fields. A field an
older or hand-edited file lacks takes its default (the renderer words it as unknown); a field of
the wrong type is refused (CaseFormatError)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tscope.model.case_fields import Fields
from tscope.model.xray import XrayResult


@dataclass(frozen=True)
class XrayToken:
    """One target token as the case keeps it: its weight, cos(g, r) and the intended rule's."""

    sequence: int
    position: int
    weight: float | None
    cosine: float | None
    micro_batch: int | None
    rank: int | None
    intended: float | None  # the intended rule's weight for this token


@dataclass(frozen=True)
class XrayRuleDeviation:
    rule: str
    max_deviation: float | None


@dataclass(frozen=True)
class XraySection:
    payload: dict[str, Any]  # the section as written: to_dict gives it back unchanged
    mode: str
    source: str
    lengths: tuple[int, ...]
    intended: str
    world_size: int | None
    forward_calls: int | None
    tokens: tuple[XrayToken, ...]
    rules: tuple[XrayRuleDeviation, ...]
    matched_rule: str | None
    matched_rules: tuple[str, ...]
    matched_max_deviation: float | None
    intended_max_deviation: float | None
    min_cosine: float | None
    boundary_weight: float | None
    leak_matrix: tuple[tuple[float | None, ...], ...]
    leak_threshold: float | None
    leak_max: float | None
    nan_forwards: int | None
    settings: dict[str, Any]  # the Trainer arguments used (trainer mode), as logged
    notes: tuple[str, ...]
    seconds: float | None
    files: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return self.payload

    @classmethod
    def of(cls, result: XrayResult, files: tuple[str, ...]) -> XraySection:
        """The whole of xray.json but the per-rule expectations: each token keeps the intended
        rule's weight only. `files`: the audit's files beside case.json (xray.json)."""
        payload = result.to_dict()
        for token in payload["tokens"]:
            expected = token.pop("expected")
            token["intended"] = expected.get(result.intended)
        payload["files"] = list(files)
        return cls.from_dict(payload)

    @classmethod
    def from_dict(cls, payload: object) -> XraySection:
        section = Fields(payload, "case.xray")
        leak = section.part("leak")
        return cls(
            payload=section.data,
            mode=section.text("mode"),
            source=section.text("source"),
            lengths=tuple(section.integers("lengths")),
            intended=section.text("intended", "token_mean"),
            world_size=section.optional_integer("world_size"),
            forward_calls=section.optional_integer("forward_calls"),
            tokens=tuple(_token(token) for token in section.records("tokens")),
            rules=tuple(
                XrayRuleDeviation(rule.text("rule"), rule.optional_number("max_deviation"))
                for rule in section.records("rules")
            ),
            matched_rule=section.optional_text("matched_rule"),
            matched_rules=tuple(section.texts("matched_rules")),
            matched_max_deviation=section.optional_number("matched_max_deviation"),
            intended_max_deviation=section.optional_number("intended_max_deviation"),
            min_cosine=section.optional_number("min_cosine"),
            boundary_weight=section.optional_number("boundary_weight"),
            leak_matrix=tuple(tuple(row) for row in leak.matrix("matrix")),
            leak_threshold=leak.optional_number("threshold"),
            leak_max=leak.optional_number("max"),
            nan_forwards=leak.optional_integer("nan_forwards"),
            settings=section.mapping("settings"),
            notes=tuple(section.texts("notes")),
            seconds=section.optional_number("seconds"),
            files=tuple(section.texts("files")),
        )


def _token(token: Fields) -> XrayToken:
    return XrayToken(
        sequence=token.optional_integer("sequence") or 0,
        position=token.optional_integer("position") or 0,
        weight=token.optional_number("weight"),
        cosine=token.optional_number("cosine"),
        micro_batch=token.optional_integer("micro_batch"),
        rank=token.optional_integer("rank"),
        intended=token.optional_number("intended"),
    )
