"""A lost-weights resume in a log too thin to judge spikes is still the incident (bench/ood's
sixth block, ood119, scored once and now spent).

Trainer GPT-2 logging every 20 steps over 290 steps (14 loss points; 20 are needed to judge
spikes, plateaus and divergence) crashed after step 210 and resumed from checkpoint 180 with its
weights re-initialized: step 200 is logged twice and the loss jumps 2.79 -> 4.12 (16.6 robust σ)
after it. The resume rule found it (a warning), but the thin-data status hid it: "insufficient
data", no headline. A resume read from a re-logged step needs no loss baseline, like a NaN; the
healthy twin (ood118, the same 14 points) stays "insufficient data" with no alert.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

OOD_DIR = Path(__file__).resolve().parents[1] / "bench" / "ood"
ACCURACY_DIR = OOD_DIR.parent / "accuracy"
for _directory in (ACCURACY_DIR, OOD_DIR):
    if str(_directory) not in sys.path:
        sys.path.insert(0, str(_directory))

import paths  # noqa: E402, F401  (fixtures/ on sys.path, no bytecode in the repository)
from generate import generate, run_folder  # noqa: E402
from ood_spec import build_ood_specs  # noqa: E402
from score import RunScore, score_spec  # noqa: E402

pytest.importorskip("transformers")

SPECS = {s.index: s for s in build_ood_specs(blocks=(6,)) if s.index in (118, 119)}


@pytest.fixture(scope="module")
def scores(tmp_path_factory: pytest.TempPathFactory) -> dict[int, RunScore]:
    cache = tmp_path_factory.mktemp("tscope-thin-resume")
    run_script = OOD_DIR / "run.py"
    assert generate(cache, list(SPECS.values()), jobs=2, verbose=False, script=run_script) == []
    return {i: score_spec(s, str(run_folder(cache, s))) for i, s in SPECS.items()}


def test_a_resume_with_lost_weights_in_a_thin_log_is_headlined(
    scores: dict[int, RunScore],
) -> None:
    score = scores[119]
    assert score.headline.status == "incident"
    assert score.headline.category == "resume_discontinuity"
    assert score.right


def test_the_thin_healthy_twin_stays_insufficient_data(scores: dict[int, RunScore]) -> None:
    score = scores[118]
    assert score.headline.status == "insufficient_data"
    assert score.alerts == []
