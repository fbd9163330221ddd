"""The replay's judgement: how much of a spike a what-if removes, what a replay that does not
reproduce the log may claim, and which reason for a mismatch comes first."""

from __future__ import annotations

from pathlib import Path

import pytest

from tscope.analyzers.replay import cause_verdict, judge
from tscope.analyzers.replay.effects import effect_findings
from tscope.model.replay import COMPARED, InterventionOutcome, ReplayStep, StepComparison
from tscope.replay.diagnosis import ReplayConditions, likely_reasons
from tscope.replay_case import case_with_replay
from tscope.replay_pipeline import investigate

ROOT = Path(__file__).resolve().parents[1]
RUNS = ROOT / "fixtures" / "data" / "trainer"
ENTRY = ROOT / "fixtures" / "entries" / "trainer_fixtures.py"
WINDOW = (86, 94)
REFERENCE = (2.5, 2.9)  # (pre-spike median, spike line)


def _steps(peak: float, level: float = 2.5, peak_step: int = 90) -> list[ReplayStep]:
    return [
        ReplayStep(s, peak if s == peak_step else level + 0.01 * (s % 3), 1.0, 1e-3, (0.0,))
        for s in range(80, 95)
    ]


def _judged(baseline_peak: float, what_if_peak: float, line: float = 2.9) -> InterventionOutcome:
    return judge(
        "skip",
        {},
        _steps(baseline_peak),
        _steps(what_if_peak),
        WINDOW,
        (REFERENCE[0], line),
    )


def test_a_what_if_that_brings_the_peak_back_to_its_neighbours_removed_the_spike():
    outcome = _judged(4.09, 2.50)
    assert outcome.effect == "removed" and outcome.spike_removed
    assert outcome.removed_fraction == pytest.approx(1.0, abs=0.02)


def test_a_peak_still_a_hair_above_the_spike_line_counts_as_removed_by_its_fraction():
    # LR ×0.01 took a 3.36 peak to 2.65; the line (2.6) sits just under the what-if's peak.
    outcome = _judged(3.36, 2.65, line=2.6)
    assert outcome.removed_fraction == pytest.approx(1 - (2.65 - 2.5) / (3.36 - 2.5))
    assert outcome.effect == "removed" and outcome.spike_removed


@pytest.mark.parametrize(
    ("what_if_peak", "effect"),
    [(4.0, "kept"), (3.8, "kept"), (3.3, "partial"), (2.9, "partial"), (2.7, "removed")],
)
def test_the_fraction_of_the_excess_removed_decides_removed_partial_or_kept(what_if_peak, effect):
    outcome = _judged(4.09, what_if_peak)
    assert outcome.effect == effect
    assert outcome.spike_removed is (effect == "removed")


def test_a_baseline_under_its_own_spike_line_is_no_spike_whatever_the_what_if_does():
    outcome = _judged(4.09, 2.50, line=4.14)
    assert outcome.effect == "no_spike" and not outcome.spike_removed
    assert outcome.removed_fraction == pytest.approx(1.0, abs=0.02)  # still reported
    (finding,) = effect_findings([outcome], qualified=False)
    assert "no spike in the replayed window" in finding.message
    assert finding.evidence["spike_removed"] is False
    assert cause_verdict([outcome]) is None


def test_a_nan_peak_the_what_if_keeps_finite_is_removed_and_a_new_nan_is_kept():
    assert _judged(float("nan"), 2.5).effect == "removed"
    assert _judged(4.09, float("inf")).effect == "kept"


def test_the_fraction_is_in_the_finding_and_decides_the_cause():
    removed, partial = _judged(4.09, 2.5), _judged(4.09, 3.3)
    (finding,) = effect_findings([removed], qualified=False)
    assert finding.evidence["removed_fraction"] == removed.removed_fraction
    assert f"removing {removed.removed_fraction:.0%} of the baseline's excess" in finding.message
    assert cause_verdict([removed]) == "data"
    assert cause_verdict([partial]) is None  # a partial effect names no cause


def test_what_ifs_of_a_replay_that_does_not_reproduce_are_not_conclusive():
    from dataclasses import replace

    outcome = replace(_judged(4.09, 2.5), conclusive=False)
    assert cause_verdict([outcome]) is None
    (finding,) = effect_findings([outcome], qualified=True)
    assert finding.message.startswith("Not conclusive")
    assert finding.severity == "info" and finding.confidence <= 0.2
    assert finding.evidence["spike_removed"] is False


def _conditions(**changes: object) -> ReplayConditions:
    settings: dict[str, object] = {
        "optimizer_restored": True,
        "rng_restored": False,
        "deterministic": True,
        "device_type": "cpu",
        "producer_device": "cpu",
        "lr_source": "constant",
        "rng_consumed": False,
        "dropout": 0.0,
    }
    settings.update(changes)
    return ReplayConditions(**settings)  # type: ignore[arg-type]


def _drifting() -> tuple[list[StepComparison], list[ReplayStep]]:
    steps = [ReplayStep(s, 3.0, 1.0, 1e-3, (3.0,)) for s in (1, 2, 3)]
    rel = [0.0, 2e-3, 5e-3]  # the first step matches, the updates do not
    comparisons = [
        StepComparison(s, (s, s), COMPARED, 3.0, 3.0 * (1 + r), 3.0 * r, r)
        for s, r in zip((1, 2, 3), rel, strict=True)
    ]
    return comparisons, steps


def test_an_lr_held_constant_comes_first_and_an_unused_rng_is_no_reason():
    comparisons, steps = _drifting()
    codes = [r.code for r in likely_reasons(comparisons, 2, _conditions(), steps)]
    assert codes[0] == "learning_rate"
    assert "rng_state_missing" not in codes  # no dropout, no random draw in the replayed steps


def test_random_draws_from_an_unrestored_rng_are_a_measured_reason():
    comparisons, steps = _drifting()
    reasons = likely_reasons(comparisons, 2, _conditions(rng_consumed=True, dropout=0.1), steps)
    assert [r.code for r in reasons][:2] == ["rng_state_missing", "learning_rate"]
    assert "p = 0.1" in reasons[0].message


def test_an_unmeasured_rng_comes_after_the_assumed_learning_rate():
    comparisons, steps = _drifting()
    conditions = _conditions(rng_consumed=None, dropout=None, optimizer_restored=False)
    codes = [r.code for r in likely_reasons(comparisons, 2, conditions, steps)]
    assert codes.index("learning_rate") < codes.index("rng_state_missing")


def _shifted_entry(tmp_path: Path) -> Path:
    shifted = tmp_path / "shifted_entry.py"
    shifted.write_text(
        "import importlib.util\n"
        f"spec = importlib.util.spec_from_file_location('fixture_entry', {str(ENTRY)!r})\n"
        "base = importlib.util.module_from_spec(spec)\n"
        "spec.loader.exec_module(base)\n"
        "def batches(start_step):\n"
        "    return base.batches(start_step + 1)\n"
    )
    return shifted


def test_a_replay_with_other_batches_names_no_cause_and_keeps_a_healthy_run_healthy(
    monkeypatch, tmp_path
):
    """The one-step-shifted entry cannot reproduce the stable run: the what-ifs are then not
    evidence, no cause is named, and the stable run stays healthy."""
    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", "stable")
    found = investigate(
        RUNS / "stable", 145, _shifted_entry(tmp_path), window=(-3, 3), what_ifs=["skip", "lr=0.5"]
    )
    fidelity = found.result.fidelity
    assert not fidelity.reproduced and fidelity.reasons[0].code == "data_order"
    assert found.result.cause is None
    assert all(not outcome.conclusive for outcome in found.result.interventions)
    effects = [f for f in found.findings if f.category == "intervention_effect"]
    assert all(f.message.startswith("Not conclusive") for f in effects)
    assert all(f.severity == "info" for f in found.findings)
    mismatch = next(f for f in found.findings if f.category == "replay_mismatch")
    assert "batches() likely yields other data" in mismatch.message
    case = case_with_replay(found, read_weights=False)
    assert case.summary.status == "healthy"
