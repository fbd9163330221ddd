"""A transient LR jump that happens to land on the warm-up's peak is still a schedule bug
(holdout8, scored once and now spent).

trainer_gpt2-lr_jump_transient-85: a Trainer GPT-2 run on cosine decay with the LR multiplied by
6.15 for 5 steps from step 134 of 170. Late in the decay, ×6.15 landed at 1.0004× the warm-up's
peak, inside the warm-restart band, and the loss hardly reacted: the jump read as a cosine
restart (info) and the run as healthy, although the LR fell back ×0.15 five steps later. A warm
restart decays smoothly over its cycle; an LR that drops back by a jump to where it was is a
transient. The LR a Trainer logs is the scheduler's arithmetic, the same on every CPU, so the run
is retrained here. Real restarts stay info: tests/test_lr_ramp.py (cosine with hard restarts,
CosineAnnealingWarmRestarts) and tests/test_ood_runs.py (ood01: a transient between restarts).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ACCURACY_DIR = Path(__file__).resolve().parents[1] / "bench" / "accuracy"
if str(ACCURACY_DIR) not in sys.path:
    sys.path.insert(0, str(ACCURACY_DIR))

import paths  # noqa: E402, F401  (fixtures/ on sys.path, no bytecode in the repository)
from generate import generate, run_folder  # noqa: E402
from spec import build_specs  # noqa: E402

import tscope  # noqa: E402

pytest.importorskip("transformers")

SPEC = next(s for s in build_specs() if s.name == "trainer_gpt2-lr_jump_transient-85")


def test_a_transient_that_lands_on_the_peak_is_a_schedule_jump(tmp_path: Path) -> None:
    assert generate(tmp_path, [SPEC], jobs=1, verbose=False) == []
    case = tscope.analyze(run_folder(tmp_path, SPEC) / "run", read_weights=False)
    step = SPEC.logged(int(SPEC.plant["step"]))
    jumps = [f for f in case.findings if f.category == "lr_schedule_jump" and f.step == step]
    assert len(jumps) == 1
    assert jumps[0].severity == "warning"
    assert "restart" not in jumps[0].message
    assert case.summary.status == "incident"
