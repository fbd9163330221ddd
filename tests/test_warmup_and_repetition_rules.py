"""warmup_stall (analyzers/explainers/warmup_stall.py) and repeated_data
(analyzers/explainers/repeated_data.py) on the benchmark runs they used to miss or misread.

The runs are the accuracy benchmark's own (bench/accuracy/spec.py's `build_specs`), retrained here
by its producers into a temporary cache (`generate`) and scored by its scorer, so the test sees
what the benchmark sees:
- trainer_llama-warmup_too_hot-50 (holdout): Trainer Llama at a constant 1.1e-2 from step 1 (×8.5
  its sampled LR, the lowest factor of the 16 planted warm-up runs). Its loss stalls but still
  gains 6.6% by half the run: the old 5% bound called it healthy; 10% keeps it.
- trainer_llama-repeated_data-50 (holdout): two batches fed again for 30 steps from step 94 at
  LR 3.6e-3. The memorisation drop itself varies (smoothness 0.10× the fresh data's, over the
  old 0.05 bound) while the loss falls to 0.77× its level: the deep-fall bound finds it.
- trainer_gpt2-repeated_data-00 (dev): two batches from step 58, read before as four (the
  longest reading, one step early); the smallest period that explains the stretch reads two.
- healthy controls of the same producers (a shuffled Llama and a GPT-2 streaming its corpus in
  order: natural data bumps) where neither rule, nor any warning, may fire.
Each planted assertion fails on the rules as they were before (measured: silent, silent, period 4
at step 57).
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
from spec import RunSpec, build_specs  # noqa: E402

import tscope  # noqa: E402

pytest.importorskip("torch")
pytest.importorskip("transformers")

WARMUP_HOT = "trainer_llama-warmup_too_hot-50"
REPEATED_DEEP = "trainer_llama-repeated_data-50"
REPEATED_TWO = "trainer_gpt2-repeated_data-00"
LLAMA_CONTROL = "trainer_llama-control-53"
SEQUENTIAL_CONTROL = "trainer_gpt2-control-08"
NAMES = (WARMUP_HOT, REPEATED_DEEP, REPEATED_TWO, LLAMA_CONTROL, SEQUENTIAL_CONTROL)


def _specs() -> dict[str, RunSpec]:
    specs = {s.name: s for s in build_specs() if s.name in NAMES}
    assert set(specs) == set(NAMES)
    return specs


@pytest.fixture(scope="module")
def specs() -> dict[str, RunSpec]:
    return _specs()


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory, specs: dict[str, RunSpec]) -> Path:
    folder = tmp_path_factory.mktemp("tscope-warmup-repetition")
    assert generate(folder, list(specs.values()), jobs=2, verbose=False) == []
    return folder


@pytest.fixture(scope="module")
def scores(cache: Path, specs: dict[str, RunSpec]) -> dict[str, RunScore]:
    return {name: score_run(str(run_folder(cache, spec))) for name, spec in specs.items()}


def _findings(cache: Path, spec: RunSpec, category: str) -> list[Any]:
    case = tscope.analyze(run_folder(cache, spec) / "run", read_weights=False)
    return [f for f in case.findings if f.category == category]


def test_a_hot_start_that_stalls_below_ten_percent_is_warmup_too_short(
    cache: Path, specs: dict[str, RunSpec], scores: dict[str, RunScore]
) -> None:
    spec = specs[WARMUP_HOT]
    (found,) = [f for f in _findings(cache, spec, "warmup_too_short") if f.severity == "warning"]
    # Stalled, yet above the old 5% bound.
    assert 0.0 <= found.evidence["relative_gain"] < 0.10
    assert found.evidence["peak_lr"] == pytest.approx(spec.peak_lr * spec.plant["lr_factor"])
    score = scores[WARMUP_HOT]
    assert score.headline.category == "warmup_too_short"
    assert score.right


def test_a_deep_smooth_fall_over_two_batches_is_repeated_data(
    cache: Path, specs: dict[str, RunSpec], scores: dict[str, RunScore]
) -> None:
    spec = specs[REPEATED_DEEP]
    (found,) = _findings(cache, spec, "repeated_data")
    # dated by its first repeat: the plant's batches fed again p steps after their first pass
    assert found.step == spec.planted_step + int(spec.plant["distinct_batches"])
    assert found.evidence["period_batches"] == spec.plant["distinct_batches"]
    assert found.evidence["last_step"] <= spec.planted_step + int(spec.plant["length"])
    # Rougher than the 0.05 bound for a shallow fall, inside the deep-fall one.
    assert 0.05 < found.evidence["smoothness_vs_before"] <= 0.15
    assert found.evidence["lowest_loss"] <= 0.9 * found.evidence["level_before"]
    assert scores[REPEATED_DEEP].headline.category == "repeated_data"
    assert scores[REPEATED_DEEP].right


def test_two_batches_repeated_read_as_two_from_their_first_repeat(
    cache: Path, specs: dict[str, RunSpec]
) -> None:
    spec = specs[REPEATED_TWO]
    (found,) = _findings(cache, spec, "repeated_data")
    assert found.evidence["period_batches"] == spec.plant["distinct_batches"] == 2
    assert found.step == spec.planted_step + 2  # the first step fed one of the two again


@pytest.mark.parametrize(
    "name", [LLAMA_CONTROL, SEQUENTIAL_CONTROL], ids=["shuffled", "sequential"]
)
def test_healthy_controls_get_neither_rule_nor_any_warning(
    cache: Path, specs: dict[str, RunSpec], scores: dict[str, RunScore], name: str
) -> None:
    spec = specs[name]
    assert _findings(cache, spec, "warmup_too_short") == []
    assert _findings(cache, spec, "repeated_data") == []
    assert scores[name].headline.status != "incident"
    assert scores[name].alerts == []
