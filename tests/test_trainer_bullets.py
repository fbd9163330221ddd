"""Issue 11's Trainer and nanoGPT bullets, reproduced on real runs trained here.

The runs are fixtures/bullet_runs.py's (the accuracy benchmark's Trainer producer on fixed specs):

- tiny Llama, gradient accumulation 4, every row of step 80 random tokens. The issue: "every
  Trainer run is headlined by a small one-step bump at step 48 (1.7 robust σ), ranked above a
  10.7σ spike at 90" and "a one-step loss doubling at a corrupted step is not reported as a loss
  spike at all". Here the loss goes 3.08 → 5.21 at step 80 and is back the next step.
- tiny GPT-2, LR ×25 from step 70 on. The issue: "headlined lr_too_high 'still climbing' at 73,
  with lr_schedule_jump fourth".
- the benchmark's plain-torch nanoGPT-style loop, LR ×100 from optimizer step 60 on (logged as
  iteration 59). The issue: "nanoGPT's ×100 LR jump at 200 is a divergence at 203 with no cause".
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

pytest.importorskip("transformers")

FIXTURES_DIR = Path(__file__).resolve().parents[1] / "fixtures"


@pytest.fixture(scope="module")
def bullet_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    if str(FIXTURES_DIR) not in sys.path:
        sys.path.append(str(FIXTURES_DIR))
    from bullet_runs import make_bullet_runs

    return make_bullet_runs(tmp_path_factory.mktemp("bullet-runs"))


def _cause_finding(case):  # type: ignore[no-untyped-def]
    cause = case.summary.card.cause
    return cause, {f.id: f for f in case.findings}.get(cause.finding_id)


def test_ga4_corrupted_step_is_the_headline_loss_spike(bullet_runs: dict[str, Path]) -> None:
    import tscope

    case = tscope.analyze(bullet_runs["llama_ga4_bad_batch"])
    assert case.summary.status == "incident"
    spikes = [f for f in case.findings if f.category == "loss_spike"]
    # The one-step jump at the corrupted step is reported as a loss spike, as a warning ...
    at_80 = [f for f in spikes if f.step == 80]
    assert at_80 and at_80[0].severity == "warning"
    assert at_80[0].evidence["impact"]["ratio"] > 1.5
    # ... and it heads the case: no smaller bump elsewhere outranks it.
    assert case.findings[0].step == 80
    assert case.summary.card.step == 80
    assert case.summary.impact.peak == pytest.approx(at_80[0].evidence["peak_value"])
    assert all(f.severity == "info" for f in spikes if f.step != 80)


def test_lr_x25_jump_is_headlined_as_the_jump_at_its_step(bullet_runs: dict[str, Path]) -> None:
    import tscope

    case = tscope.analyze(bullet_runs["gpt2_lr_x25"])
    cause, finding = _cause_finding(case)
    assert cause.category == "lr_schedule_jump"
    assert finding is not None and finding.step == 70
    assert "×25" in finding.message
    # The jump is the first finding, not a symptom or lr_too_high above it.
    assert case.findings[0].category == "lr_schedule_jump"
    too_high = [f for f in case.findings if f.category == "lr_too_high"]
    assert all(case.findings.index(f) > 0 for f in too_high)


def test_nanogpt_lr_x100_jump_is_the_cause_at_its_step(bullet_runs: dict[str, Path]) -> None:
    import tscope

    case = tscope.analyze(bullet_runs["nanogpt_lr_x100"])
    assert case.summary.status == "incident"
    cause, finding = _cause_finding(case)
    assert cause.category == "lr_schedule_jump"
    assert finding is not None and finding.step == 59  # nanoGPT logs optimizer step 60 as 59
    assert case.findings[0] is finding
