"""Defects the out-of-distribution set (bench/ood/, docs/accuracy-ood.md) found, reproduced on
small runs trained by the real producers (bench/accuracy's generator and producers, in a
temporary cache) and scored by the benchmark's scorer.

- Trainer Llama logging every 5 steps with a step-decay schedule: a planted ×11 LR jump three
  logged points after the schedule's own ×0.1 drop was hidden by the drop (ood13); the healthy
  twin must stay silent.
- nanoGPT with a 30-step warm-up and a ×17 LR jump at step 89: the spike it causes fell in the
  warm-up rule's horizon (twice the warm-up after it ends, step 90) and was blamed on the warm-up
  too (ood31, trained here as drawn).
- Trainer GPT-2 on cosine with hard restarts and a ×15 transient jump between two restarts: the
  second restart, back to the warm-up's peak, was measured against the transient's LR and read
  as a schedule bug (ood01, trained here as drawn).
- ood42 (second block), a healthy Lightning run with `accumulate_grad_batches=4` (CSVLogger, a
  10-step warm-up to 3.6e-3): its fast descent right after the warm-up read as two batches fed
  again (`repeated_data` warning at step 20); trained here as drawn (~15 s), it must stay silent.
  The loss itself is tests/test_repetition_in_first_descent.py's, for the fast loop.
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
from ood_spec import OodSpec, build_ood_specs  # noqa: E402
from score import RunScore, score_spec  # noqa: E402
from spec import CONTROL, LR_JUMP_PERSISTENT, LR_JUMP_TRANSIENT  # noqa: E402

pytest.importorskip("transformers")

RUN_SCRIPT = OOD_DIR / "run.py"
SMALL = {
    "hidden": 32,
    "layers": 2,
    "heads": 2,
    "batch_size": 8,
    "grad_accum": 1,
    "precision": "fp32",
    "data_order": "shuffled",
    "eval_every": 0,
    "optimizer": "adamw",
}
# Step decay after a 10-step warm-up over 120 steps (24 logged points, 20 are needed to judge):
# ×0.1 from optimizer step 66 and 94. The Trainer logs at step k the LR of step k+1, so the first
# drop shows at logged step 65 and the ×11 jump planted at step 76 at 75, two points later.
STEP_DECAY = {
    **SMALL,
    "model": "llama",
    "steps": 120,
    "schedule": "step",
    "warmup_steps": 10,
    "peak_lr": 3e-3,
    "save_every": 40,
    "logging_steps": 5,
}
SPECS = [
    OodSpec(
        producer="trainer_llama",
        index=90,
        seed=21,
        cause=LR_JUMP_PERSISTENT,
        plant={"step": 76, "factor": 11.0},
        setup="test-stepdecay",
        **STEP_DECAY,
    ),
    OodSpec(
        producer="trainer_llama",
        index=91,
        seed=23,
        cause=CONTROL,
        setup="test-stepdecay",
        **STEP_DECAY,
    ),
    # ood31 as drawn by bench/ood/ood_spec.py (a 4-layer, 128-wide nanoGPT; ~30 s to train).
    OodSpec(
        producer="nanogpt",
        index=31,
        seed=121587,
        cause=LR_JUMP_TRANSIENT,
        plant={"step": 89, "factor": 17.36, "window": 3},
        setup="wide",
        model="nanogpt",
        hidden=128,
        layers=4,
        heads=4,
        steps=180,
        batch_size=8,
        grad_accum=1,
        schedule="linear",
        warmup_steps=30,
        peak_lr=0.00138,
        precision="fp32",
        save_every=45,
        data_order="shuffled",
        logging_steps=1,
        optimizer="adamw",
        eval_every=0,
    ),
    next(s for s in build_ood_specs() if s.index == 1),  # ood01, ~15 s to train
]


@pytest.fixture(scope="module")
def scores(tmp_path_factory: pytest.TempPathFactory) -> dict[str, RunScore]:
    cache = tmp_path_factory.mktemp("tscope-ood")
    assert generate(cache, list(SPECS), jobs=2, verbose=False, script=RUN_SCRIPT) == []
    return {s.name: score_spec(s, str(run_folder(cache, s))) for s in SPECS}


def test_a_jump_after_a_step_decay_drop_is_the_headline(scores: dict[str, RunScore]) -> None:
    run = scores[SPECS[0].name]
    assert run.headline.category == "lr_schedule_jump"
    assert run.right  # at the logged point whose LR holds the jump (causes.step_window)


def test_the_step_decay_control_stays_silent(scores: dict[str, RunScore]) -> None:
    run = scores[SPECS[1].name]
    assert run.right and run.alerts == []


def test_a_jump_after_a_long_warmup_is_not_the_warmups(scores: dict[str, RunScore]) -> None:
    run = scores[SPECS[2].name]
    assert run.right and run.headline.category == "lr_schedule_jump"
    assert "warmup_too_short" not in {alert.category for alert in run.alerts}


def test_a_restart_after_a_transient_jump_is_still_a_restart(scores: dict[str, RunScore]) -> None:
    spec = SPECS[3]
    assert spec.schedule == "cosine_restarts" and spec.cause == LR_JUMP_TRANSIENT
    run = scores[spec.name]
    assert run.right
    # the transient is the only LR warning; both hard restarts are info
    assert [a.step for a in run.alerts if a.category == "lr_schedule_jump"] == [spec.planted_step]


def test_a_lightning_run_accumulating_4_batches_descends_without_repeated_data(
    tmp_path: Path,
) -> None:
    pytest.importorskip("lightning")
    spec = next(s for s in build_ood_specs(blocks=(2,)) if s.index == 42)
    assert spec.producer == "lightning" and spec.cause == CONTROL and spec.grad_accum == 4
    assert generate(tmp_path, [spec], jobs=1, verbose=False, script=RUN_SCRIPT) == []
    run = score_spec(spec, str(run_folder(tmp_path, spec)))
    assert run.right and run.alerts == []
