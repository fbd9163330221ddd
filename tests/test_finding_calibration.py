"""Every alert finding's calibrated confidence (analyzers/calibration.py): the generated table,
the one place it is applied, the script that derives it, and the scorer's finding-level "right"
(bench/accuracy/causes.py `finding_is_right`) that the counts rest on."""

from __future__ import annotations

import json
import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

import tscope
from tscope.analyzers import calibration
from tscope.analyzers.calibration import (
    calibrate,
    calibrated_confidence,
    evidence_band,
    finding_confidence,
)
from tscope.analyzers.categories import CATEGORIES
from tscope.analyzers.finding_calibration_table import (
    BASE_RATE,
    BY_CATEGORY,
    BY_EVIDENCE,
    HEADLINE_RIGHT_OF_NAMED,
    PSEUDO_COUNTS,
)
from tscope.model import Finding
from tscope.model.categories import ALERT_SEVERITIES

ROOT = Path(__file__).resolve().parents[1]
for folder in (ROOT / "scripts", ROOT / "bench" / "accuracy"):
    if str(folder) not in sys.path:
        sys.path.insert(0, str(folder))

import causes  # noqa: E402
import derive_calibration  # noqa: E402
from spec import build_specs  # noqa: E402

LR_JUMP_FIXTURE = ROOT / "fixtures" / "data" / "trainer" / "lr_jump"  # make_trainer_runs.py


def _finding(category: str, severity: str, confidence: float) -> Finding:
    return Finding(category, severity, confidence, 10, None, "m", {}, "s")


def test_the_table_loads_and_its_counts_add_up():
    assert BY_CATEGORY and BY_EVIDENCE and PSEUDO_COUNTS == derive_calibration.PSEUDO_COUNTS
    registry = {category.id for category in CATEGORIES}
    for table in (BY_CATEGORY, BY_EVIDENCE):
        for confidence, right, alerts in table.values():
            assert 0.0 <= confidence <= 1.0 and 0 <= right <= alerts
    assert set(BY_CATEGORY) <= registry  # keyed by the registry's names
    assert BASE_RATE[1] == sum(v[1] for v in BY_CATEGORY.values())
    assert BASE_RATE[2] == sum(v[2] for v in BY_CATEGORY.values())
    for category, (_, right, alerts) in BY_CATEGORY.items():
        cells = [v for (c, _, _), v in BY_EVIDENCE.items() if c == category]
        assert (sum(v[1] for v in cells), sum(v[2] for v in cells)) == (right, alerts)
    assert {severity for _, severity, _ in BY_EVIDENCE} <= set(ALERT_SEVERITIES)


def test_every_registry_category_has_an_entry_or_keeps_its_rules_prior():
    """The documented default: a category the benchmark never produced keeps its prior."""
    for category in CATEGORIES:
        for prior in (0.35, 0.6, 0.9):
            got = finding_confidence(category.id, "warning", prior)
            if category.id in BY_CATEGORY:
                cell = BY_EVIDENCE.get((category.id, "warning", evidence_band(prior)))
                assert got == (cell or BY_CATEGORY[category.id])[0]
            else:
                assert got == prior
            assert finding_confidence(category.id, "info", prior) == prior  # alerts only


def test_the_evidence_band_is_the_rules_prior_in_tenths():
    assert [evidence_band(c) for c in (0.0, 0.35, 0.6, 0.7, 0.85, 0.99, 1.0)] == [
        0.0,
        0.3,
        0.6,
        0.7,
        0.8,
        0.9,
        0.9,
    ]


def test_a_real_runs_findings_carry_the_tables_confidence_and_their_rules_prior():
    case = tscope.analyze(LR_JUMP_FIXTURE, read_weights=False)
    alerts = [f for f in case.findings if f.severity in ALERT_SEVERITIES]
    assert alerts and all(f.rule_confidence is not None for f in case.findings)
    looked_up = 0
    for finding in case.findings:
        assert finding.rule_confidence is not None
        key = (finding.category, finding.severity, evidence_band(finding.rule_confidence))
        if key in BY_EVIDENCE:
            assert finding.confidence == BY_EVIDENCE[key][0]
            looked_up += 1
        elif finding.severity not in ALERT_SEVERITIES or finding.category not in BY_CATEGORY:
            assert finding.confidence == finding.rule_confidence
    assert looked_up >= 1  # the LR jump's own finding is in the table
    head = case.findings[0]
    assert head.category == "lr_schedule_jump" and head.rule_confidence != head.confidence
    again = tscope.model.case.Case.from_dict(json.loads(json.dumps(case.to_dict())))
    assert [f.rule_confidence for f in again.findings] == [f.rule_confidence for f in case.findings]


def test_calibrate_applies_once():
    category, severity, band = next(iter(BY_EVIDENCE))
    finding = _finding(category, severity, band + 0.05)
    once = calibrate([finding])
    assert once[0].confidence == BY_EVIDENCE[(category, severity, band)][0]
    assert once[0].rule_confidence == band + 0.05
    assert calibrate(once) == once
    info = calibrate([replace(finding, severity="info")])[0]
    assert info.confidence == info.rule_confidence == band + 0.05
    unmeasured = calibrate([_finding("no_such_category", "warning", 0.42)])[0]
    assert unmeasured.confidence == 0.42
    assert calibration.calibrated_confidence("no_such_category", 0.42) == 0.42


def _results(alerts: list[tuple[str, str, float, bool]], split: str = "dev") -> dict[str, object]:
    return {
        "runs": [
            {
                "split": split,
                "alerts": [
                    {
                        "category": c,
                        "severity": s,
                        "confidence": 0.5,
                        "rule_confidence": p,
                        "right": r,
                    }
                    for c, s, p, r in alerts
                ],
            }
        ]
    }


def test_the_script_derives_the_documented_arithmetic(tmp_path: Path):
    # 6 alerts: spike 0.8-band 3/3, spike 0.6-band 0/1, ckpt 0/2.
    alerts = [("loss_spike", "warning", 0.82, True)] * 3 + [
        ("loss_spike", "warning", 0.62, False),
        ("checkpoint_incomplete", "warning", 0.9, False),
        ("checkpoint_incomplete", "warning", 0.9, False),
    ]
    results = tmp_path / "results.json"
    results.write_text(json.dumps(_results(alerts)), encoding="utf-8")
    table = derive_calibration.derive(derive_calibration.alerts_of(json.loads(results.read_text())))
    base = (3 + 1) / (6 + 2)  # 0.5
    assert table.base == (0.5, 3, 6)
    assert table.by_category["loss_spike"] == (round((3 + 2 * base) / (4 + 2), 2), 3, 4)
    assert table.by_category["checkpoint_incomplete"] == (round((0 + 2 * base) / 4, 2), 0, 2)
    # A band shrinks toward the rest of its category (shrunk toward base), not toward itself.
    others_of_08 = (0 + 2 * base) / (1 + 2)
    assert table.by_evidence[("loss_spike", "warning", 0.8)] == (
        round((3 + 2 * others_of_08) / 5, 2),
        3,
        3,
    )
    others_of_06 = (3 + 2 * base) / (3 + 2)
    # ...and is never stated above its own Laplace estimate: 0 of 1 shrunk toward its
    # category's 0.8 would say 0.53, its own (0 + 1) / (1 + 2) says 0.33.
    shrunk_06 = 2 * others_of_06 / 3
    assert shrunk_06 > 1 / 3
    assert table.by_evidence[("loss_spike", "warning", 0.6)][0] == round(1 / 3, 2)
    # One band = the whole category: it shrinks toward the base rate.
    assert table.by_evidence[("checkpoint_incomplete", "warning", 0.9)][0] == 0.25
    assert derive_calibration.alerts_of(_results(alerts))[0].rule_confidence == 0.82
    # Written, the module reads back as the same table, and a second run writes the same bytes.
    source = derive_calibration.table_source(table, "a test")
    assert source == derive_calibration.table_source(
        derive_calibration.derive(derive_calibration.alerts_of(_results(list(reversed(alerts))))),
        "a test",
    )
    namespace: dict[str, object] = {}
    exec(compile(source, "table", "exec"), namespace)
    assert namespace["BY_EVIDENCE"] == table.by_evidence
    assert namespace["BY_CATEGORY"] == table.by_category


def test_results_written_before_calibration_read_their_confidence_as_the_prior():
    old = {
        "runs": [
            {"alerts": [{"category": "x", "severity": "warning", "confidence": 0.7, "right": True}]}
        ]
    }
    assert derive_calibration.alerts_of(old)[0].rule_confidence == 0.7


# --- the scorer's finding-level "right" -----------------------------------------------------------


def _spec(producer: str, cause: str):  # type: ignore[no-untyped-def]
    return next(s for s in build_specs() if s.producer == producer and s.cause == cause)


def test_a_checkpoint_missing_the_deleted_file_names_the_planted_cause():
    for cause in ("resume_optimizer_lost", "resume_scheduler_lost"):
        trainer = _spec("trainer_gpt2", cause)
        resumed_from = trainer.logged(int(trainer.plant["step"])) - 1
        assert causes.finding_is_right(
            trainer, "checkpoint_incomplete", resumed_from, "checkpoints"
        )
        assert not causes.finding_is_right(trainer, "checkpoint_incomplete", 5, "checkpoints")
        # nanoGPT keeps the optimizer in ckpt.pt: its checkpoint_incomplete (RNG) is not the cause
        nanogpt = _spec("nanogpt", cause)
        at = nanogpt.logged(int(nanogpt.plant["step"]))
        assert not causes.finding_is_right(nanogpt, "checkpoint_incomplete", at, "checkpoints")


def test_symptoms_count_in_the_causes_window_and_never_on_a_control():
    hot = _spec("lightning", "warmup_too_hot")
    assert causes.finding_is_right(hot, "loss_plateau", 0, "logs")
    jump = _spec("lightning", "lr_jump_persistent")
    at = jump.logged(int(jump.plant["step"]))
    assert causes.finding_is_right(jump, "weight_norm_growth", at + 10, "checkpoints")
    assert causes.finding_is_right(jump, "lr_too_high", at + 1, "logs")
    assert not causes.finding_is_right(jump, "weight_norm_growth", at - 20, "checkpoints")
    # "LR too high" near a bad batch names a cause that is not there
    bad = _spec("nanogpt", "bad_batch")
    at = bad.logged(int(bad.plant["step"]))
    assert causes.finding_is_right(bad, "loss_spike", at, "logs")
    assert not causes.finding_is_right(bad, "lr_too_high", at, "logs")
    # a layer "origin" of a global LR cause is not a true observation of it
    assert not causes.finding_is_right(jump, "layer_origin", at + 10, "checkpoints")
    control = _spec("nanogpt", "control")
    for category in ("loss_spike", "loss_plateau", "checkpoint_incomplete", "lr_schedule_jump"):
        assert not causes.finding_is_right(control, category, 50, "logs")


@pytest.mark.parametrize("producer", ["trainer_gpt2", "trainer_llama"])
def test_the_trainer_naming_rule_covers_both_trainer_producers(producer: str):
    assert ("resume_optimizer_lost", producer) in causes.NAMES_CAUSE_BY_PRODUCER


def test_headline_counts_are_per_named_cause_and_a_controls_headline_is_wrong():
    def run(cause: str, named: str | None, right: bool) -> dict[str, Any]:
        headline = {"category": named, "headline_category": "loss_spike"}
        return {"cause": cause, "right": right, "headline": headline, "alerts": []}

    results = {
        "runs": [
            run("bad_batch", "bad_batch", True),
            run("repeated_data", "bad_batch", True),
            run("control", "bad_batch", False),
            run("lr_ramp", "lr_too_high", False),
            run("bad_batch", None, False),  # called healthy: names no cause
        ]
    }
    assert derive_calibration.headline_counts([results]) == {
        "bad_batch": (2, 3),
        "lr_too_high": (0, 1),
    }
    measured = round(
        (HEADLINE_RIGHT_OF_NAMED["lr_schedule_jump"][0] + 1)
        / (HEADLINE_RIGHT_OF_NAMED["lr_schedule_jump"][1] + 2),
        2,
    )
    # the measured rate, capped at the cause finding's own confidence
    assert calibrated_confidence("lr_schedule_jump", 0.99) == min(measured, 0.99)
    assert calibrated_confidence("lr_schedule_jump", 0.5) == min(measured, 0.5)
    # never above what the cause finding itself states (a weak branch of a strong category)
    assert calibrated_confidence("warmup_too_short", 0.22) == 0.22
    assert calibrated_confidence("undetermined", 0.0) == 0.0
