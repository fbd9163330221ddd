"""Causes compete for each incident (analyzers/causes.py), on runs the benchmark's real producers
train here: a nanoGPT-style loop with a block frozen mid-run, the same loop with a block frozen
before its first update (never in the optimizer's state: intentional-looking), a Trainer GPT-2
run resumed from a checkpoint whose scheduler.pt was deleted (the Trainer then loads neither
optimizer nor scheduler), and a healthy nanoGPT-style control."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest

ACCURACY_DIR = Path(__file__).resolve().parents[1] / "bench" / "accuracy"
if str(ACCURACY_DIR) not in sys.path:
    sys.path.insert(0, str(ACCURACY_DIR))

import causes as bench_causes  # noqa: E402
import paths  # noqa: E402, F401  (puts fixtures/ on sys.path, no bytecode in the repository)
from generate import generate, run_folder  # noqa: E402
from smoke_runs import smoke_specs  # noqa: E402
from spec import CONTROL, FROZEN_LAYER, RESUME_SCHEDULER_LOST  # noqa: E402

pytest.importorskip("transformers")

_NANOGPT_CONTROL = next(s for s in smoke_specs() if s.producer == "nanogpt" and s.cause == CONTROL)
_TRAINER = next(s for s in smoke_specs() if s.producer == "trainer_gpt2")
FROZEN = replace(
    _NANOGPT_CONTROL, index=94, seed=13, cause=FROZEN_LAYER, plant={"step": 15, "layer": 1}
)
FROZEN_FROM_START = replace(FROZEN, index=95, seed=17, plant={"step": 1, "layer": 0})
RESUMED = replace(
    _TRAINER,
    index=96,
    seed=19,
    cause=RESUME_SCHEDULER_LOST,
    plant={"step": 41, "resume_from": 40, "crash_after": 45},
)
SPECS = [FROZEN, FROZEN_FROM_START, RESUMED, _NANOGPT_CONTROL]


@pytest.fixture(scope="module")
def cases(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    from tscope.pipeline import analyze

    cache = tmp_path_factory.mktemp("tscope-competition")
    assert generate(cache, SPECS, jobs=2, verbose=False) == []
    return {spec.name: analyze(run_folder(cache, spec) / "run") for spec in SPECS}


def _finding(case: Any, finding_id: str | None) -> Any:
    return next(f for f in case.findings if f.id == finding_id)


def test_a_block_frozen_mid_run_is_the_cause_seen_in_one_checkpoint(cases):
    case = cases[FROZEN.name]
    card = case.summary.card
    assert card is not None and card.cause.category == "frozen_parameters"
    cause = _finding(case, card.cause.finding_id)
    # nanoGPT overwrites one ckpt.pt: the frozen block shows in its Adam step counters alone.
    assert cause.severity == "warning"
    assert cause.evidence["frozen_since_step"] == FROZEN.plant["step"]
    # dated where the block stopped, not at the checkpoint that shows it (it was before)
    assert cause.step == FROZEN.plant["step"] < cause.evidence["seen_at_step"]
    assert all(t.startswith("transformer.h.1.") for t in cause.evidence["frozen_tensors"])
    assert bench_causes.cause_is_right(FROZEN, "frozen_parameters", cause.step, cause.source)
    # No spike elsewhere in the run is offered as the frozen block's incident.
    assert "spiked" not in case.summary.verdict


def test_a_block_the_optimizer_never_held_is_not_an_alert(cases):
    case = cases[FROZEN_FROM_START.name]
    frozen = [f for f in case.findings if f.category == "frozen_parameters"]
    assert all(f.severity == "info" for f in frozen)
    assert case.summary.status == "healthy"


def test_a_resume_that_lost_the_optimizer_names_the_resume_not_an_earlier_spike(cases):
    case = cases[RESUMED.name]
    card = case.summary.card
    assert card is not None
    assert card.cause.category in bench_causes.accepted(RESUMED)
    cause = _finding(case, card.cause.finding_id)
    assert bench_causes.cause_is_right(RESUMED, card.cause.category, cause.step, cause.source)
    assert card.cause.category != "undetermined"
    # The other resume evidence corroborates; every alternative says why it is not the cause.
    assert all(a.reason for a in case.alternatives)


def test_the_control_has_no_frozen_block_and_no_verdict(cases):
    case = cases[_NANOGPT_CONTROL.name]
    assert case.summary.status == "healthy"
    assert not [f for f in case.findings if f.category == "frozen_parameters"]
    assert case.alternatives == []
