"""The test suite's small fixed benchmark runs (tests/test_accuracy_bench.py and the tests that
train a run of their own): indices from spec.SMOKE_INDEX, so in no split (split "smoke")."""

from __future__ import annotations

from typing import Any

from spec import BAD_BATCH, CONTROL, LR_JUMP_PERSISTENT, LR_JUMP_TRANSIENT, RunSpec

# The settings every smoke run shares (and tests/test_data_causes.py's runs): small enough to train
# in seconds on a CPU.
SMOKE_SETTINGS: dict[str, Any] = {
    "hidden": 32,
    "layers": 2,
    "heads": 2,
    "steps": 60,
    "batch_size": 8,
    "grad_accum": 1,
    "schedule": "cosine",
    "warmup_steps": 10,
    "peak_lr": 3e-3,
    "precision": "fp32",
    "save_every": 20,
    "data_order": "shuffled",
}


def smoke_specs() -> list[RunSpec]:
    """A handful of small fixed runs for the test suite (tests/test_accuracy_bench.py): 60 steps,
    batch 8, width 32, fp32; indices from SMOKE_INDEX, so in neither split (split "smoke")."""
    common = SMOKE_SETTINGS
    return [
        RunSpec(
            producer="nanogpt",
            index=90,
            seed=1,
            model="nanogpt",
            cause=LR_JUMP_TRANSIENT,
            plant={"step": 40, "factor": 30.0, "window": 3},
            **common,
        ),
        RunSpec(producer="nanogpt", index=91, seed=3, model="nanogpt", cause=CONTROL, **common),
        RunSpec(
            producer="trainer_gpt2",
            index=90,
            seed=5,
            model="gpt2",
            cause=BAD_BATCH,
            plant={"step": 40, "rows": 8, "of_rows": 8, "generator_seed": 11},
            **common,
        ),
        RunSpec(
            producer="lightning",
            index=90,
            seed=7,
            model="nanogpt",
            cause=LR_JUMP_PERSISTENT,
            plant={"step": 40, "factor": 20.0},
            **common,
        ),
    ]
