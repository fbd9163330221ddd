"""The out-of-distribution set's eighth to twelfth blocks (ood_blocks.py holds the first seven;
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
# The tenth block (2026-12-07): again earlier knobs in combinations no block trained, each cause
# once: a GPT-NeoX model over three epochs, a bf16 GQA Qwen2 on a cosine schedule started hot,
# Lightning under 8-way accumulation, nanoGPT's padded vocabulary logged to stdout, OPT logged
# every 5 steps, GPT-2 with dropout and label smoothing, Adam without clipping, a polynomial
# schedule logged every 2 steps, a Mistral MQA with a larger epsilon, and nanoGPT on code.
TENTH_BLOCK: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    ("neox-epochs3-badbatch", "trainer_llama", {"model": "gpt_neox", "epochs": 3}, BAD_BATCH),
    (
        "qwen2-bf16-cos-hot",
        "trainer_llama",
        {"model": "qwen2", "heads": 4, "kv_heads": 2, "precision": "bf16", "schedule": "cosine"},
        WARMUP_TOO_HOT,
    ),
    (
        "lt-tb-accum8-repeat",
        "lightning",
        {"lightning_logger": "tensorboard", "batch_size": 4, "grad_accum": 8},
        REPEATED_DATA,
    ),
    (
        "nano-vocab1k-stdout-weaktransient",
        "nanogpt",
        {"vocab_size": 1024, "log_format": "stdout", "plant_weakest": True},
        LR_JUMP_TRANSIENT,
    ),
    (
        "opt-log5-optlost",
        "trainer_gpt2",
        {"model": "opt", "logging_steps": 5},
        RESUME_OPTIMIZER_LOST,
    ),
    (
        "gpt2-dropout-smooth-frozen",
        "trainer_gpt2",
        {"dropout": 0.1, "label_smoothing": 0.1},
        FROZEN_LAYER,
    ),
    (
        "nano-adam-noclip-persistent",
        "nanogpt",
        {"optimizer": "adam", "max_grad_norm": 0.0, "log_format": "csv"},
        LR_JUMP_PERSISTENT,
    ),
    (
        "llama-poly-log2-ramp",
        "trainer_llama",
        {"schedule": "polynomial", "logging_steps": 2},
        LR_RAMP,
    ),
    (
        "mistral-mqa-eps-reinit",
        "trainer_llama",
        {"model": "mistral", "heads": 4, "kv_heads": 1, "adam_epsilon": 1e-6},
        RESUME_WEIGHTS_REINIT,
    ),
    (
        "nano-code-jsonl-lin-schedlost",
        "nanogpt",
        {"corpus": "code", "log_format": "jsonl", "schedule": "linear"},
        RESUME_SCHEDULER_LOST,
    ),
)
# The eleventh block (2026-12-07, trained after the session's rule changes, scored once at its
# end): again earlier knobs in new combinations, each cause once, with two Trainer runs keeping
# only two checkpoints (so a checkpoint window has a single past window to be judged against).
ELEVENTH_BLOCK: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    ("gpt2-keep2-persistent", "trainer_gpt2", {"save_total_limit": 2}, LR_JUMP_PERSISTENT),
    (
        "llama-keep2-cos-reinit",
        "trainer_llama",
        {"save_total_limit": 2, "schedule": "cosine"},
        RESUME_WEIGHTS_REINIT,
    ),
    (
        "nano-stdout-log3-transient",
        "nanogpt",
        {"log_format": "stdout", "logging_steps": 3},
        LR_JUMP_TRANSIENT,
    ),
    (
        "lt-tb-bf16-accum2-ramp",
        "lightning",
        {"lightning_logger": "tensorboard", "precision": "bf16", "grad_accum": 2},
        LR_RAMP,
    ),
    (
        "gpt2-code-b8a2-badbatch",
        "trainer_gpt2",
        {"corpus": "code", "batch_size": 8, "grad_accum": 2},
        BAD_BATCH,
    ),
    (
        "qwen2-nowd-hot",
        "trainer_llama",
        {"model": "qwen2", "heads": 4, "kv_heads": 2, "weight_decay": 0.0},
        WARMUP_TOO_HOT,
    ),
    (
        "nano-csv-beta99-repeat",
        "nanogpt",
        {"adam_beta2": 0.99, "log_format": "csv"},
        REPEATED_DATA,
    ),
    ("opt-eval20-frozen", "trainer_gpt2", {"model": "opt", "eval_every": 20}, FROZEN_LAYER),
    (
        "neox-linear-optlost",
        "trainer_llama",
        {"model": "gpt_neox", "schedule": "linear"},
        RESUME_OPTIMIZER_LOST,
    ),
    (
        "nano-jsonl-wsd-schedlost",
        "nanogpt",
        {"schedule": "wsd", "log_format": "jsonl"},
        RESUME_SCHEDULER_LOST,
    ),
)

# The twelfth block (added 2026-12-07, trained after that session's rule changes for optimizer
# families, fp16 skips and data changes, scored once): earlier knobs in new combinations, each
# cause once; SGD and Adafactor with checkpoints, fp16 with SGD and with a cyclic schedule.
TWELFTH_BLOCK: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    (
        "nano-fp16-sgd-csv-transient",
        "nanogpt",
        {"precision": "fp16", "optimizer": "sgd", "log_format": "csv"},
        LR_JUMP_TRANSIENT,
    ),
    (
        "llama-adafactor-log5-optlost",
        "trainer_llama",
        {"optimizer": "adafactor", "logging_steps": 5},
        RESUME_OPTIMIZER_LOST,
    ),
    ("gpt2-sgd-eval10-ramp", "trainer_gpt2", {"optimizer": "sgd", "eval_every": 10}, LR_RAMP),
    (
        "lt-csv-step-badbatch",
        "lightning",
        {"lightning_logger": "csv", "schedule": "step"},
        BAD_BATCH,
    ),
    (
        "nano-code-eval20-reinit",
        "nanogpt",
        {"corpus": "code", "eval_every": 20},
        RESUME_WEIGHTS_REINIT,
    ),
    (
        "phi-cosrestart-hot",
        "trainer_gpt2",
        {"model": "phi", "schedule": "cosine_restarts"},
        WARMUP_TOO_HOT,
    ),
    (
        "mistral-bf16-accum2-repeat",
        "trainer_llama",
        {"model": "mistral", "precision": "bf16", "grad_accum": 2},
        REPEATED_DATA,
    ),
    (
        "lt-tb-invsqrt-frozen",
        "lightning",
        {"lightning_logger": "tensorboard", "schedule": "inverse_sqrt"},
        FROZEN_LAYER,
    ),
    (
        "gpt2-smooth-log2-persistent",
        "trainer_gpt2",
        {"label_smoothing": 0.1, "logging_steps": 2},
        LR_JUMP_PERSISTENT,
    ),
    (
        "nano-fp16-cyclic-schedlost",
        "nanogpt",
        {"precision": "fp16", "schedule": "cyclic"},
        RESUME_SCHEDULER_LOST,
    ),
)
