"""The data causes read from logs (repeated_data, bad_batch from a one-step break), on runs the
accuracy benchmark's own producer trains here: planted runs where each rule fires at the planted
step, and healthy controls (shuffled and sequential data) where neither may fire.

The runs are the plain-torch nanoGPT producer's (bench/accuracy/produce_nanogpt.py, 60 steps,
width 32, fp32), trained once per session into a temporary cache by the benchmark's generator and
scored by its scorer; their indices (≥ SMOKE_INDEX) keep them out of every split. Index % 3
picks the log format: 93 and 96 write metrics.jsonl, 94 and 97 metrics.csv (both with the
gradient norm).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ACCURACY_DIR = Path(__file__).resolve().parents[1] / "bench" / "accuracy"
if str(ACCURACY_DIR) not in sys.path:
    sys.path.insert(0, str(ACCURACY_DIR))

import paths  # noqa: E402, F401  (puts fixtures/ on sys.path, no bytecode in the repository)
from generate import generate, run_folder  # noqa: E402
from score import RunScore, score_run  # noqa: E402
from smoke_runs import SMOKE_SETTINGS, smoke_specs  # noqa: E402
from spec import BAD_BATCH, CONTROL, REPEATED_DATA, RunSpec  # noqa: E402

import tscope  # noqa: E402

pytest.importorskip("torch")


def _nanogpt_run(index: int, seed: int, cause: str, **plant: Any) -> RunSpec:
    """A smoke-sized nanoGPT run (bench/accuracy/spec.py's SMOKE_SETTINGS) with this plant."""
    settings = {**SMOKE_SETTINGS, "data_order": plant.pop("data_order", "shuffled")}
    return RunSpec(
        producer="nanogpt",
        index=index,
        seed=seed,
        model="nanogpt",
        cause=cause,
        plant=plant,
        **settings,
    )


ONE_BATCH = _nanogpt_run(93, 9, REPEATED_DATA, step=32, length=14, distinct_batches=1)
TWO_BATCHES = _nanogpt_run(94, 13, REPEATED_DATA, step=30, length=16, distinct_batches=2)
# Three rows of eight corrupted: a one-step bump well below 1.5× (a note by the impact rule). Two
# rows give 1.14× here, inside the range of healthy one-step breaks (up to 1.14×, rule 1.2×).
PART_BATCH = _nanogpt_run(96, 15, BAD_BATCH, step=44, rows=3, of_rows=8, generator_seed=5)
SEQUENTIAL_CONTROL = _nanogpt_run(97, 17, CONTROL, data_order="sequential")
SHUFFLED_CONTROL = next(s for s in smoke_specs() if s.cause == CONTROL)
PLANTED = [ONE_BATCH, TWO_BATCHES, PART_BATCH]
CONTROLS = [SHUFFLED_CONTROL, SEQUENTIAL_CONTROL]


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("tscope-data-causes")
    assert generate(folder, PLANTED + CONTROLS, jobs=2, verbose=False) == []
    return folder


@pytest.fixture(scope="module")
def scores(cache: Path) -> dict[str, RunScore]:
    return {s.name: score_run(str(run_folder(cache, s))) for s in PLANTED + CONTROLS}


def _findings(cache: Path, spec: RunSpec, category: str) -> list[Any]:
    case = tscope.analyze(run_folder(cache, spec) / "run", read_weights=False)
    return [f for f in case.findings if f.category == category]


@pytest.mark.parametrize("spec", [ONE_BATCH, TWO_BATCHES], ids=["one_batch", "two_batches"])
def test_repeated_batches_are_found_where_they_were_fed(cache: Path, spec: RunSpec) -> None:
    findings = _findings(cache, spec, "repeated_data")
    assert len(findings) == 1
    found = findings[0]
    first = spec.logged(int(spec.plant["step"]))
    assert found.severity == "warning"
    # dated by the first step fed a batch again, p steps after the batches' first pass
    assert abs(found.step - (first + int(spec.plant["distinct_batches"]))) <= 1
    assert found.evidence["period_batches"] == spec.plant["distinct_batches"]
    # The stretch ends within the repetition (the last repeated step, logged).
    assert found.evidence["last_step"] <= first + int(spec.plant["length"])
    assert found.evidence["smoothness_vs_before"] < 0.05


@pytest.mark.parametrize("spec", [ONE_BATCH, TWO_BATCHES], ids=["one_batch", "two_batches"])
def test_repeated_data_is_the_headline(scores: dict[str, RunScore], spec: RunSpec) -> None:
    score = scores[spec.name]
    assert score.headline.category == "repeated_data"
    assert score.right


def test_a_partly_corrupted_batch_is_a_bad_batch_at_its_step(cache: Path) -> None:
    findings = _findings(cache, PART_BATCH, "bad_batch")
    step = PART_BATCH.planted_step
    assert [f.step for f in findings] == [step]
    evidence = findings[0].evidence
    # Below the impact rule's 1.5× (a loss-spike note at most), yet the shape and the gradient
    # norm of the same step say one batch.
    assert 1.2 <= evidence["ratio_to_trend"] < 1.5
    assert evidence["grad_norm_ratio"] >= 2.5
    assert abs(evidence["next_vs_excess"]) <= 0.35
    assert "tscope replay --around" in findings[0].message


def test_the_bad_batch_is_the_headline(scores: dict[str, RunScore]) -> None:
    score = scores[PART_BATCH.name]
    assert score.headline.category == "bad_batch"
    assert score.right


@pytest.mark.parametrize("spec", CONTROLS, ids=["shuffled", "sequential"])
def test_healthy_controls_get_neither(cache: Path, scores: dict[str, RunScore], spec: RunSpec):
    assert _findings(cache, spec, "repeated_data") == []
    assert _findings(cache, spec, "bad_batch") == []
    assert scores[spec.name].alerts == []


def test_the_first_thing_to_do_is_the_named_cause_s_advice() -> None:
    # The headline is the divergence the repetition led to, whose own advice is about the LR:
    # "lower the peak learning rate" under a verdict naming repeated data (planted hunt).
    case = tscope.analyze(Path(__file__).parent / "data" / "loader_stuck", read_weights=False)
    (repeated,) = [f for f in case.findings if f.category == "repeated_data"]
    assert case.summary.card is not None and case.summary.card.cause.category == "repeated_data"
    assert case.findings[0].category != "repeated_data"
    assert case.summary.next_steps[0] == repeated.suggestion
