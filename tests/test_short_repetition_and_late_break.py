"""Two rule changes on the benchmark runs they were made for, retrained here by the benchmark's
own producers (bench/accuracy/spec.py `build_specs`) into a temporary cache and scored by its
scorer, so the test sees what the benchmark sees:
- lightning-repeated_data-56 (holdout2): Lightning, two batches fed again for 10 steps from
  logged step 80 — the shortest planted repetition (6 repeat-like points). Its run's fresh data is
  often repeat-like at 0.3σ, so the chance count asked for 7 points and the run was called
  healthy; its points are far smoother than that (largest |d2| 0.03σ), and the count at its own
  roughness (repeated_data.MAX_SMOOTH_CHANCE) finds it.
- trainer_gpt2-bad_batch-03 (test): Trainer GPT-2, one row of 4 random at step 117 (8 robust σ),
  compared before with a larger excursion in the run's early phase, which this rule leaves to the
  optimization explainers; against the excursions after that phase it dominates 3.6×
  (bad_batch_logs, DOMINANCE_PHASE).
Both planted assertions fail on the rules as they were (measured: healthy, healthy).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ACCURACY_DIR = Path(__file__).resolve().parents[1] / "bench" / "accuracy"
if str(ACCURACY_DIR) not in sys.path:
    sys.path.insert(0, str(ACCURACY_DIR))

import paths  # noqa: E402, F401  (puts fixtures/ on sys.path, no bytecode in the repository)
from generate import generate, run_folder  # noqa: E402
from score import RunScore, score_run  # noqa: E402
from spec import RunSpec, build_specs  # noqa: E402

pytest.importorskip("torch")
pytest.importorskip("transformers")
pytest.importorskip("lightning")

SHORT_REPETITION = "lightning-repeated_data-56"
LATE_BREAK = "trainer_gpt2-bad_batch-03"
NAMES = (SHORT_REPETITION, LATE_BREAK)


@pytest.fixture(scope="module")
def specs() -> dict[str, RunSpec]:
    found = {s.name: s for s in build_specs() if s.name in NAMES}
    assert set(found) == set(NAMES)
    return found


@pytest.fixture(scope="module")
def scores(
    tmp_path_factory: pytest.TempPathFactory, specs: dict[str, RunSpec]
) -> dict[str, RunScore]:
    folder = tmp_path_factory.mktemp("tscope-short-repetition")
    assert generate(folder, list(specs.values()), jobs=2, verbose=False) == []
    return {name: score_run(str(run_folder(folder, spec))) for name, spec in specs.items()}


def test_the_shortest_repetition_is_found_at_its_start(
    specs: dict[str, RunSpec], scores: dict[str, RunScore]
) -> None:
    score = scores[SHORT_REPETITION]
    assert score.headline.category == "repeated_data", score.headline
    spec = specs[SHORT_REPETITION]
    # dated by the first step fed a batch again: the plant's batches come back p steps later
    assert score.headline.step == spec.planted_step + int(spec.plant["distinct_batches"])
    assert score.right


def test_a_late_bad_batch_is_not_hidden_by_an_early_instability(
    specs: dict[str, RunSpec], scores: dict[str, RunScore]
) -> None:
    score = scores[LATE_BREAK]
    assert score.headline.category == "bad_batch", score.headline
    assert score.headline.step == specs[LATE_BREAK].planted_step
    assert score.right and score.recorded
