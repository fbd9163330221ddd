"""The out-of-distribution set's eighth and ninth blocks (ood_blocks.py holds the first seven;
ood_spec.py draws the runs). Each row: setup, producer, what it changes from the benchmark's
draw, and the planted cause."""

from __future__ import annotations

from typing import Any

import paths  # noqa: F401  (puts bench/accuracy and fixtures on sys.path)
from spec import (
    BAD_BATCH,
    FROZEN_LAYER,
    LR_JUMP_PERSISTENT,
    LR_JUMP_TRANSIENT,
    LR_RAMP,
    REPEATED_DATA,
    RESUME_OPTIMIZER_LOST,
    RESUME_SCHEDULER_LOST,
    RESUME_WEIGHTS_REINIT,
    WARMUP_TOO_HOT,
)

# The eighth block: one cause, an LR ramp, planted on a decaying schedule (linear or cosine, after
# the default warm-up) late enough that the decay partly cancels it: the LR may climb back up
# without passing the warm-up's peak. Six setups, each trained healthy and planted; it adds no
# knob and no draw setting ("plant_range" and "plant_weakest" are the sixth and fifth blocks').
EIGHTH_BLOCK: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    (
        "gpt2-lin-decay-ramp",
        "trainer_gpt2",
        {"schedule": "linear", "plant_range": (0.45, 0.6)},
        LR_RAMP,
    ),
    (
        "llama-cos-decay-ramp",
        "trainer_llama",
        {"schedule": "cosine", "plant_range": (0.45, 0.6)},
        LR_RAMP,
    ),
    (
        "nano-csv-lin-decay-ramp",
        "nanogpt",
        {"schedule": "linear", "plant_range": (0.5, 0.65), "log_format": "csv"},
        LR_RAMP,
    ),
    (
        "nano-jsonl-cos-decay-weakramp",
        "nanogpt",
        {
            "schedule": "cosine",
            "plant_range": (0.4, 0.55),
            "plant_weakest": True,
            "log_format": "jsonl",
        },
        LR_RAMP,
    ),
    (
        "lt-csv-lin-decay-weakramp",
        "lightning",
        {
            "lightning_logger": "csv",
            "schedule": "linear",
            "plant_range": (0.45, 0.6),
            "plant_weakest": True,
        },
        LR_RAMP,
    ),
    (
        "lt-tb-cos-decay-ramp",
        "lightning",
        {"lightning_logger": "tensorboard", "schedule": "cosine", "plant_range": (0.5, 0.65)},
        LR_RAMP,
    ),
)
# The ninth block: earlier knobs in combinations no block trained (each cause once), with no new
# knob and no new draw setting: a hot start without clipping seen every 5 steps, a wide bf16 model,
# a one-step LR jump Lightning logs every 5 steps, bf16 under accumulation, a late ramp under label
# smoothing, SGD losing its weights, a code corpus evaluated every 10 steps, Lightning in bf16
# without clipping, a long cosine run, and the weakest persistent jump in WSD's decay.
NINTH_BLOCK: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    (
        "llama-log5-noclip-hot",
        "trainer_llama",
        {"logging_steps": 5, "max_grad_norm": 0},
        WARMUP_TOO_HOT,
    ),
    (
        "nano-wide-bf16-badbatch",
        "nanogpt",
        {"hidden": 128, "layers": 4, "heads": 4, "precision": "bf16", "log_format": "jsonl"},
        BAD_BATCH,
    ),
    (
        "lt-tb-log5-transient",
        "lightning",
        {"lightning_logger": "tensorboard", "logging_steps": 5},
        LR_JUMP_TRANSIENT,
    ),
    (
        "gpt2-bf16-accum4-optlost",
        "trainer_gpt2",
        {"precision": "bf16", "batch_size": 4, "grad_accum": 4},
        RESUME_OPTIMIZER_LOST,
    ),
    (
        "llama-labelsmooth-lateramp",
        "trainer_llama",
        {"label_smoothing": 0.1, "plant_range": (0.75, 0.9)},
        LR_RAMP,
    ),
    (
        "nano-sgd-reinit",
        "nanogpt",
        {"optimizer": "sgd", "log_format": "csv"},
        RESUME_WEIGHTS_REINIT,
    ),
    (
        "gpt2-eval10-code-repeat",
        "trainer_gpt2",
        {"eval_every": 10, "corpus": "code"},
        REPEATED_DATA,
    ),
    (
        "lt-csv-bf16-noclip-frozen",
        "lightning",
        {"lightning_logger": "csv", "precision": "bf16", "max_grad_norm": 0},
        FROZEN_LAYER,
    ),
    (
        "nano-long-cos-schedlost",
        "nanogpt",
        {"steps_range": (400, 600), "schedule": "cosine", "log_format": "stdout"},
        RESUME_SCHEDULER_LOST,
    ),
    (
        "llama-wsd-late-weakjump",
        "trainer_llama",
        {"schedule": "wsd", "plant_late": True, "plant_weakest": True},
        LR_JUMP_PERSISTENT,
    ),
)
