"""A healthy run's data bump under a steady LR is info; the same size of bump after an LR jump
stays a warning (analyzers/explainers/spikes.py `optimizer_ruled_out`).

The runs are the accuracy benchmark's own (bench/accuracy/spec.py's `build_specs`), retrained here
by its producer (the real transformers.Trainer) into a temporary cache:
- trainer_gpt2-control-07 and -09 (test split): healthy Trainer GPT-2 runs streaming their corpus
  in order. At step 111 the corpus changes text and the loss steps up 1.23–1.24× for 10–12
  logged points (5.2–6.3 points at its peak height, over the 4.5 of a short bump), with the LR
  constant or decaying: the old rule gave both a loss_spike warning.
- trainer_gpt2-lr_jump_transient-02 (dev): the LR raised for a window from step 84; the loss
  bumps 1.49× for 18 points, as long as a data bump, and that one is the LR's.
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
from spec import RunSpec, build_specs  # noqa: E402

from tscope.analyzers.impact import SHORT_BUMP_POINTS  # noqa: E402
from tscope.analyzers.spike_judgement import optimizer_ruled_out  # noqa: E402
from tscope.model import Case, Run  # noqa: E402
from tscope.model.categories import ALERT_SEVERITIES  # noqa: E402
from tscope.pipeline import analyze_run  # noqa: E402

pytest.importorskip("torch")
pytest.importorskip("transformers")

CONTROLS = ("trainer_gpt2-control-07", "trainer_gpt2-control-09")
LR_JUMP = "trainer_gpt2-lr_jump_transient-02"
TEXT_CHANGE_STEP = 113  # the bump's peak in both controls


@pytest.fixture(scope="module")
def specs() -> dict[str, RunSpec]:
    found = {s.name: s for s in build_specs() if s.name in (*CONTROLS, LR_JUMP)}
    assert set(found) == {*CONTROLS, LR_JUMP}
    return found


@pytest.fixture(scope="module")
def analyses(
    tmp_path_factory: pytest.TempPathFactory, specs: dict[str, RunSpec]
) -> dict[str, tuple[Case, Run]]:
    folder = tmp_path_factory.mktemp("tscope-data-bumps")
    assert generate(folder, list(specs.values()), jobs=2, verbose=False) == []
    return {
        name: analyze_run(run_folder(folder, spec) / "run", read_weights=False)
        for name, spec in specs.items()
    }


@pytest.fixture(scope="module")
def cases(analyses: dict[str, tuple[Case, Run]]) -> dict[str, Case]:
    return {name: case for name, (case, _) in analyses.items()}


@pytest.fixture(scope="module")
def runs(analyses: dict[str, tuple[Case, Run]]) -> dict[str, Run]:
    return {name: run for name, (_, run) in analyses.items()}


@pytest.mark.parametrize("name", CONTROLS)
def test_a_text_change_under_a_steady_lr_is_no_warning(cases: dict[str, Case], name: str) -> None:
    case = cases[name]
    assert [f.category for f in case.findings if f.severity in ALERT_SEVERITIES] == []
    assert case.summary.status == "healthy"
    bump = next(
        f for f in case.findings if f.category == "loss_spike" and f.step == TEXT_CHANGE_STEP
    )
    impact = bump.evidence["impact"]
    assert isinstance(impact, dict)
    # The bump is there, and long: the short-bump rule alone would have made it a warning.
    assert impact["ratio"] > 1.2 and impact["recovered"] is True
    assert impact["effective_points"] > SHORT_BUMP_POINTS
    assert bump.severity == "info"


def test_the_same_kind_of_bump_after_an_lr_jump_stays_a_warning(cases: dict[str, Case]) -> None:
    case = cases[LR_JUMP]
    bumps = [f for f in case.findings if f.category == "loss_spike" and 84 <= (f.step or 0) <= 90]
    assert bumps and all(f.severity == "warning" for f in bumps)
    impact = bumps[0].evidence["impact"]
    assert isinstance(impact, dict) and impact["ratio"] < 1.5 and impact["recovered"] is True
    assert impact["effective_points"] > SHORT_BUMP_POINTS
    card = case.summary.card
    assert card is not None and card.cause.category == "lr_schedule_jump"


def test_the_lr_is_what_rules_the_optimizer_out(
    runs: dict[str, Run], cases: dict[str, Case]
) -> None:
    """The check itself on the runs: the LR steady through the controls' bump, not after the
    jump."""
    for name, expected, window in (
        (CONTROLS[0], True, (TEXT_CHANGE_STEP, TEXT_CHANGE_STEP)),
        (LR_JUMP, False, (84, 90)),
    ):
        spike = next(
            s
            for s in cases[name].spikes
            if s.metric == "train/loss" and window[0] <= s.peak_step <= window[1]
        )
        assert optimizer_ruled_out(runs[name], spike) is expected
