"""The typed case read back from case.json: one versioned Case.from_dict, a lossless round trip
for every case the project writes, older files (without later optional fields) still readable,
a newer schema or a field of the wrong type refused in one line (exit 2 in `tscope report`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

import tscope
from tests.case_payloads import healthy_case, incident_case, partial_payload
from tscope.cli import app
from tscope.model.case import Case
from tscope.model.case_fields import CaseFormatError
from tscope.render import load_case, render_case
from tscope.render.json_file import (
    case_json_text,
    normalized_payload,
    normalized_payload_and_text,
)

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "data"
# Every kind of run the fixtures hold: Trainer logs (spikes, a resume, a partial window), the
# trainscope runs and TensorBoard layer runs (checkpoints with a per-layer heat map), DCP/FSDP2,
# DeepSpeed and Lightning checkpoint layouts, an LR-sweep member.
FIXTURE_RUNS = [
    *(f"trainer/{name}" for name in sorted(p.name for p in (FIXTURES / "trainer").iterdir())),
    "trainscope/healthy",
    "trainscope/layer_lr_bug",
    "layer_tb/layer_lr_bug",
    "layouts/dcp_fsdp2_2ranks",
    "layouts/deepspeed_zero2_bf16",
    "layouts/lightning",
    "sweep/lr8_seed7",
]


def assert_round_trip(payload: dict[str, Any]) -> Case:
    """The payload read as a Case writes the same payload, and the same case.json bytes."""
    case = Case.from_dict(payload)
    again = case.to_dict()
    assert again == payload
    assert case_json_text(again) == case_json_text(payload)
    return case


@pytest.mark.parametrize("build", [incident_case, healthy_case], ids=["incident", "healthy"])
def test_the_rendered_test_cases_round_trip(build: Any) -> None:
    case = build()
    read_back = assert_round_trip(case.to_dict())
    assert read_back.summary == case.summary and read_back.run == case.run


def test_a_payload_with_a_layers_section_round_trips() -> None:
    case = assert_round_trip(normalized_payload(partial_payload()))  # as case.json holds it
    assert case.layers is not None and len(case.layers.names) == 12
    assert case.partial[0].problem == "truncated at byte 4096"


@pytest.mark.slow
@pytest.mark.parametrize("run", FIXTURE_RUNS)
def test_every_fixture_case_round_trips(run: str) -> None:
    case = tscope.analyze(FIXTURES / run)
    payload = case.to_dict()
    read_back = assert_round_trip(payload)
    assert (read_back.layers is None) == (case.layers is None)
    assert read_back.summary == Case.from_dict(payload).summary


def test_an_xray_section_round_trips_typed() -> None:
    from tscope.model.xray import RuleFit, TokenWeight, XrayResult
    from tscope.model.xray_section import XraySection

    tokens = tuple(
        TokenWeight(sequence, position, 1.0 + 0.25 * sequence, 0.999, sequence)
        for sequence, length in enumerate((3, 2))
        for position in range(1, length)
    )
    result = XrayResult(
        mode="entry",
        source="entry.py",
        lengths=(3, 2),
        intended="token_mean",
        tokens=tokens,
        forward_calls=2,
        world_size=1,
        boundary_weight=0.0,
        leak_matrix=((1.0, 0.0), (0.0, 1.0)),
        leak_threshold=1e-6,
        fits=(
            RuleFit("token_mean", 0.25, (1.0,) * len(tokens)),
            RuleFit("micro_batch_mean", 0.0, tuple(t.weight for t in tokens)),
        ),
        matched_rules=("micro_batch_mean",),
    )
    case = incident_case()
    case.xray = XraySection.of(result, files=("xray.json",))
    read_back = assert_round_trip(normalized_payload(case.to_dict()))
    assert read_back.xray is not None
    assert read_back.xray.matched_rule == "micro_batch_mean"
    assert [t.intended for t in read_back.xray.tokens] == [1.0, 1.0, 1.0]
    assert [t.weight for t in read_back.xray.tokens] == [1.0, 1.0, 1.25]
    assert read_back.xray.leak_max == 0.0 and read_back.xray.files == ("xray.json",)


def test_a_newer_schema_is_refused_in_one_line() -> None:
    payload = healthy_case().to_dict()
    payload["schema_version"] = "2"
    with pytest.raises(CaseFormatError, match=r"^case schema 2 is not schema 1") as caught:
        Case.from_dict(payload)
    assert "\n" not in str(caught.value)
    with pytest.raises(CaseFormatError, match="no schema_version"):
        Case.from_dict({"run": {}})


def test_tscope_report_exits_2_on_a_newer_schema(tmp_path: Path) -> None:
    payload = healthy_case().to_dict()
    payload["schema_version"] = "2.0"
    (tmp_path / "case.json").write_text(json.dumps(payload), encoding="utf-8")
    result = CliRunner().invoke(app, ["report", str(tmp_path)])
    assert result.exit_code == 2
    assert "case schema 2.0 is not schema 1" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize(
    ("path", "value", "problem"),
    [
        (("summary", "verdict"), 3, "case.summary.verdict is a int, not a string"),
        (("findings", 0, "confidence"), "high", "case.findings[0].confidence is a str"),
        (("findings", 0, "severity"), "fatal", "case.findings[0]: severity must be one of"),
        (("spikes", 0, "peak_step"), 60.5, "case.spikes[0].peak_step is a float, not an int"),
        (("run",), [1], "case.run is not a JSON object"),
        (("summary", "card", "cause"), "x", "case.summary.card.cause is not a JSON object"),
    ],
)
def test_a_field_of_the_wrong_type_ends_tscope_report_in_one_line(
    tmp_path: Path, path: tuple[Any, ...], value: Any, problem: str
) -> None:
    payload = incident_case().to_dict()
    parent = payload
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    (tmp_path / "case.json").write_text(json.dumps(payload), encoding="utf-8")
    result = CliRunner().invoke(app, ["report", str(tmp_path), "--out", str(tmp_path / "out")])
    assert result.exit_code == 2, result.output
    assert problem in result.output
    assert len(result.output.strip().splitlines()) == 1
    assert not (tmp_path / "out" / "case.html").exists()


# Fields an earlier tscope did not write yet (summary.card, spikes' alarm score, findings' ids and
# thresholds, caveats, events, limits, alternatives, layers): such a file still renders.
LATER_FIELDS = {
    "": ("caveats", "events", "limits", "alternatives", "layers", "story", "change_points"),
    "summary": ("card", "impact", "partial"),
    "spikes": ("alarm_score", "alarm_detector", "nonfinite", "end_step"),
    "findings": ("threshold", "id", "source", "spike_id"),
}


def test_a_case_json_without_later_optional_fields_renders(tmp_path: Path) -> None:
    payload = incident_case().to_dict()
    for section, keys in LATER_FIELDS.items():
        targets = [payload] if not section else payload[section]
        for target in targets if isinstance(targets, list) else [targets]:
            for key in keys:
                target.pop(key, None)
    (tmp_path / "case.json").write_text(json.dumps(payload), encoding="utf-8")
    case = load_case(tmp_path)
    assert case.summary.card is None and case.spikes[0].alarm_score is None
    assert case.findings[0].source == "logs" and case.caveats == []
    written = {path.name: path for path in render_case(case, tmp_path / "out")}
    html = written["case.html"].read_text(encoding="utf-8")
    assert "robust σ" in html  # the spike's magnitude stands in for the missing alarm score
    assert json.loads(written["case.json"].read_text(encoding="utf-8"))["caveats"] == []


def test_a_summary_key_the_typed_case_does_not_hold_is_a_loud_error() -> None:
    from tscope.pipeline import analyzed_summary

    assert analyzed_summary({"status": "healthy", "verdict": "ok"}, partial=True).partial
    with pytest.raises(ValueError, match=r"summary keys \['trend'\] are not in"):
        analyzed_summary({"status": "healthy", "trend": "up"}, partial=False)


@pytest.mark.parametrize(
    "payload",
    [incident_case().to_dict(), healthy_case().to_dict(), partial_payload()],
    ids=["incident", "healthy", "partial"],
)
def test_case_json_is_written_from_its_first_encoding(payload: dict[str, Any]) -> None:
    """render_case writes case.json from the text it normalized the payload through: encoding
    the normalized payload again must give the same bytes (rounding and sorting are idempotent)."""
    normalized, text = normalized_payload_and_text(payload)
    assert normalized == normalized_payload(payload)
    assert case_json_text(normalized) == text
