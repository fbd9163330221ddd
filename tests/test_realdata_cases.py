"""Real public logs (../shared/realdata): no false criticals, the documented events are found."""

from __future__ import annotations

from pathlib import Path

import pytest

import tscope

REALDATA = Path(__file__).resolve().parents[2] / "shared" / "realdata"
pytestmark = pytest.mark.skipif(not REALDATA.is_dir(), reason="../shared/realdata is absent")


def all_files() -> list[Path]:
    if not REALDATA.is_dir():
        return []
    return sorted(p for p in REALDATA.rglob("*") if p.suffix in (".csv", ".json", ".log"))


@pytest.mark.parametrize("path", all_files(), ids=lambda p: p.name[:40])
def test_no_critical_finding_on_real_logs(path):
    case = tscope.analyze(path)
    assert [f for f in case.findings if f.severity == "critical"] == []


@pytest.mark.parametrize(
    "name", ["baize_tcm_lora__trainer_state.json", "tinyllama_chat_dpo__trainer_state.json"]
)
def test_healthy_trainer_runs_are_healthy(name):
    """Baize: epoch-boundary drops and batch-2 bumps are the run's texture, not incidents."""
    case = tscope.analyze(REALDATA / "hf_trainer_state" / name)
    assert case.summary.status == "healthy"


def test_modded_nanogpt_data_bumps_are_not_warnings():
    for path in sorted((REALDATA / "modded_nanogpt" / "runs").glob("*.csv")):
        case = tscope.analyze(path)
        assert case.summary.status == "healthy", path.name


def test_pythia_one_step_spike_is_found():
    case = tscope.analyze(REALDATA / "pythia_wandb_export" / "14m-seed5.csv")
    top = max(case.spikes, key=lambda s: s.magnitude)
    assert top.peak_step == 95457 and top.peak_value == pytest.approx(4.26, abs=0.01)


def test_bloom_176b_spike_is_a_warning():
    case = tscope.analyze(REALDATA / "megatron_logs" / "tr11-176B-ml__chronicles.log")
    assert any(f.step == 31219 and f.severity == "warning" for f in case.findings)


def test_bloom_104b_overflow_cascade():
    case = tscope.analyze(REALDATA / "megatron_logs" / "tr8b-104B__chronicles.log")
    by_category = {f.category: f for f in case.findings}
    assert by_category["loss_spike"].severity == "warning"
    # The halvings began at the loss jump (17062): the cascade follows the blow-up, as context.
    collapse = by_category["loss_scale_collapse"]
    assert collapse.severity == "info" and collapse.evidence["loss_broke_at_step"] == 17062
