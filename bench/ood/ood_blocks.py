"""The out-of-distribution set's setups: one table per block (ood_spec.py draws the runs).

Each row names a setup, its producer and what it changes from the benchmark's draw (the second
to fifth blocks also name the planted cause); the *_KNOBS tuples are the spec.FIXED_KNOBS each
block added, left out of an OodSpec's JSON at their defaults.
"""

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

# (setup, producer, what it changes from the benchmark's draw). Each is trained as a control and
# with one planted cause.
SETUPS: tuple[tuple[str, str, dict[str, Any]], ...] = (
    ("sgdr", "trainer_gpt2", {"schedule": "cosine_restarts"}),
    ("sgdr", "nanogpt", {"schedule": "cosine_restarts", "eval_every": 20}),
    ("wsd", "trainer_llama", {"schedule": "wsd"}),
    ("wsd", "nanogpt", {"schedule": "wsd"}),
    ("invsqrt", "nanogpt", {"schedule": "inverse_sqrt"}),
    ("stepdecay", "nanogpt", {"schedule": "step"}),
    ("stepdecay", "trainer_llama", {"schedule": "step", "logging_steps": 5}),
    ("poly", "trainer_gpt2", {"schedule": "polynomial"}),
    ("log5", "trainer_gpt2", {"logging_steps": 5}),
    ("log10", "trainer_llama", {"logging_steps": 10}),
    ("fp16", "nanogpt", {"precision": "fp16"}),
    ("sgd", "nanogpt", {"optimizer": "sgd"}),
    ("adafactor", "trainer_llama", {"optimizer": "adafactor"}),
    ("long", "nanogpt", {"steps": "long"}),
    ("eval", "trainer_gpt2", {"eval_every": 10}),
    ("wide", "nanogpt", {"hidden": 128, "layers": 4, "heads": 4}),
)
# The second block: what an outside user would bring besides, each with the planted cause named
# (drawn by `_plant` at its step and strength). Lightning's producer clips gradients at 1.0
# (`gradient_clip_val`) in every run; its loss is logged per step (`self.log(on_step=True)`),
# its LR by LearningRateMonitor, both every `log_every_n_steps`.
SECOND_BLOCK_KNOBS = ("lightning_logger", "log_format", "resumes")
SECOND_BLOCK: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    (
        "lt-tb-log5",
        "lightning",
        {"lightning_logger": "tensorboard", "logging_steps": 5},
        LR_JUMP_PERSISTENT,
    ),
    (
        "lt-tb-log10",
        "lightning",
        {"lightning_logger": "tensorboard", "logging_steps": 10},
        WARMUP_TOO_HOT,
    ),
    ("lt-csv-log5", "lightning", {"lightning_logger": "csv", "logging_steps": 5}, BAD_BATCH),
    (
        "lt-bf16",
        "lightning",
        {"lightning_logger": "tensorboard", "precision": "bf16"},
        LR_JUMP_TRANSIENT,
    ),
    (
        "lt-accum4",
        "lightning",
        {"lightning_logger": "tensorboard", "grad_accum": 4},
        LR_JUMP_TRANSIENT,
    ),
    ("lt-accum4", "lightning", {"lightning_logger": "csv", "grad_accum": 4}, BAD_BATCH),
    ("cosminlr", "trainer_gpt2", {"schedule": "cosine_min_lr"}, WARMUP_TOO_HOT),
    ("customcsv", "nanogpt", {"log_format": "custom_csv"}, RESUME_OPTIMIZER_LOST),
    ("resume2x", "trainer_llama", {"resumes": 2}, LR_JUMP_PERSISTENT),
)
# The third block: what an outside user brings besides (LLM-pretraining AdamW settings, no
# gradient clipping, dropout, a longer context, a padded vocabulary, tiny and large batches, a
# long warm-up, a nanoGPT loop logging every 2 iterations, a log only in trainer_state.json),
# one run per planted cause of spec.ALL_CAUSES. "warmup_fraction" sets the warm-up as a fraction
# of the drawn steps; a planted bad batch corrupts at least a quarter of the step's rows.
THIRD_BLOCK_KNOBS = (
    "adam_beta2",
    "weight_decay",
    "max_grad_norm",
    "dropout",
    "block_size",
    "vocab_size",
    "logging_first_step",
    "report_to",
)
THIRD_BLOCK: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    ("llm-adamw", "trainer_gpt2", {"adam_beta2": 0.95, "weight_decay": 0.1}, LR_RAMP),
    ("noclip", "trainer_llama", {"max_grad_norm": 0.0}, RESUME_WEIGHTS_REINIT),
    ("dropout", "trainer_gpt2", {"dropout": 0.1}, REPEATED_DATA),
    ("ctx128", "nanogpt", {"block_size": 128, "log_format": "stdout"}, LR_JUMP_TRANSIENT),
    (
        "batch2",
        "nanogpt",
        {"batch_size": 2, "grad_accum": 1, "log_format": "csv"},
        BAD_BATCH,
    ),
    ("padvocab", "nanogpt", {"vocab_size": 1024, "log_format": "jsonl"}, RESUME_SCHEDULER_LOST),
    ("nano-log2", "nanogpt", {"logging_steps": 2, "log_format": "jsonl"}, LR_JUMP_PERSISTENT),
    (
        "lt-batch64",
        "lightning",
        {"batch_size": 64, "grad_accum": 1, "lightning_logger": "tensorboard"},
        FROZEN_LAYER,
    ),
    (
        "lt-bf16-accum2-log2",
        "lightning",
        {"lightning_logger": "csv", "precision": "bf16", "grad_accum": 2, "logging_steps": 2},
        WARMUP_TOO_HOT,
    ),
    (
        "longwarmup-nolog",
        "trainer_llama",
        {
            "schedule": "constant",
            "warmup_fraction": 0.4,
            "logging_steps": 5,
            "logging_first_step": True,
            "report_to": "none",
        },
        RESUME_OPTIMIZER_LOST,
    ),
)
# The fourth block: model families of transformers the benchmark never trains (the spec's `model`,
# see trainer_models.FAMILIES; random weights from the config, the producers' byte-level
# tokenizer) and Trainer features it never uses, one run per planted cause of spec.ALL_CAUSES.
FOURTH_BLOCK_KNOBS = (
    "kv_heads",
    "tie_word_embeddings",
    "gradient_checkpointing",
    "adam_epsilon",
    "save_total_limit",
)
FOURTH_BLOCK: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    ("pythia", "trainer_llama", {"model": "gpt_neox"}, LR_JUMP_TRANSIENT),
    (
        "qwen2-gqa",
        "trainer_llama",
        {"model": "qwen2", "heads": 4, "kv_heads": 2},
        RESUME_OPTIMIZER_LOST,
    ),
    ("mistral-mqa-swa", "trainer_llama", {"model": "mistral", "heads": 4, "kv_heads": 1}, LR_RAMP),
    ("opt", "trainer_gpt2", {"model": "opt"}, BAD_BATCH),
    ("phi", "trainer_gpt2", {"model": "phi"}, WARMUP_TOO_HOT),
    ("bloom-alibi", "trainer_gpt2", {"model": "bloom"}, FROZEN_LAYER),
    ("falcon-mqa", "trainer_gpt2", {"model": "falcon", "heads": 4}, LR_JUMP_PERSISTENT),
    (
        "gptj-gradckpt",
        "trainer_gpt2",
        {"model": "gptj", "gradient_checkpointing": True},
        RESUME_WEIGHTS_REINIT,
    ),
    ("gpt2-untied", "trainer_gpt2", {"tie_word_embeddings": False}, REPEATED_DATA),
    (
        "llama-eps-keep2",
        "trainer_llama",
        {"adam_epsilon": 1e-6, "save_total_limit": 2, "warmup_fraction": 0.1},
        RESUME_SCHEDULER_LOST,
    ),
)
# The fifth block: what outside users' runs look like that no block has covered yet, one run per
# planted cause of spec.ALL_CAUSES. Besides the knobs (spec.FIXED_KNOBS, the three new ones in
# FIFTH_BLOCK_KNOBS), a row may name draw settings that are no field of the spec: "steps" (a
# fixed length), "warmup_fraction" (as the third block), "peak_lr_range" (the peak LR drawn
# log-uniformly there instead of 1e-3–4e-3), "plant_late" (the planted step drawn in the last
# 15% of the run) and "plant_weakest" (the planted strength at the weakest `_plant` draws).
FIFTH_BLOCK_KNOBS = ("epochs", "label_smoothing", "corpus")
FIFTH_BLOCK: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    ("multiepoch-small", "trainer_gpt2", {"epochs": 5}, REPEATED_DATA),
    ("labelsmooth", "trainer_llama", {"label_smoothing": 0.1}, LR_JUMP_TRANSIENT),
    ("code-corpus", "nanogpt", {"corpus": "code", "log_format": "jsonl"}, BAD_BATCH),
    (
        "highlr",
        "nanogpt",
        {"peak_lr_range": (8e-3, 1.6e-2), "log_format": "stdout"},
        FROZEN_LAYER,
    ),
    ("adam-nowd", "nanogpt", {"optimizer": "adam", "log_format": "csv"}, RESUME_OPTIMIZER_LOST),
    (
        "plateau-eval",
        "trainer_llama",
        {"schedule": "reduce_lr_on_plateau", "eval_every": 10, "warmup_steps": 0},
        RESUME_WEIGHTS_REINIT,
    ),
    (
        "lt-accum2-val",
        "lightning",
        {"lightning_logger": "csv", "grad_accum": 2, "eval_every": 20},
        WARMUP_TOO_HOT,
    ),
    (
        "nano-clip05-untied",
        "nanogpt",
        {"max_grad_norm": 0.5, "tie_word_embeddings": False, "log_format": "jsonl"},
        RESUME_SCHEDULER_LOST,
    ),
    (
        "short60-log2",
        "trainer_gpt2",
        {"steps": 60, "warmup_fraction": 0.1, "logging_steps": 2, "logging_first_step": True},
        LR_RAMP,
    ),
    (
        "lt-late-weakjump",
        "lightning",
        {"lightning_logger": "tensorboard", "plant_late": True, "plant_weakest": True},
        LR_JUMP_PERSISTENT,
    ),
)
# The sixth block: what outside users' runs look like that no block has covered yet, one run per
# planted cause of spec.ALL_CAUSES. It adds no knob (Lightning now honours `max_grad_norm`: 0 is
# no clipping, Lightning's own default); besides the fifth block's draw settings a row may name
# "steps_range" (the length drawn in that range, in tens), "plant_range" (the planted step drawn
# in those fractions of the run: early, during or right after the warm-up, or in its very last
# steps; a repetition is cut to end with the run) and "plant_rows" (a bad batch of exactly that
# many rows).
SIXTH_BLOCK: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    (
        "early-persistent",
        "nanogpt",
        {"plant_range": (0.1, 0.2), "log_format": "jsonl"},
        LR_JUMP_PERSISTENT,
    ),
    (
        "batch2-weakjump",
        "trainer_gpt2",
        {"batch_size": 2, "grad_accum": 1, "plant_weakest": True},
        LR_JUMP_TRANSIENT,
    ),
    (
        "lt-batch32-onerow",
        "lightning",
        {"lightning_logger": "csv", "batch_size": 32, "grad_accum": 1, "plant_rows": 1},
        BAD_BATCH,
    ),
    ("accum8", "trainer_llama", {"batch_size": 2, "grad_accum": 8}, RESUME_OPTIMIZER_LOST),
    (
        "log20",
        "trainer_gpt2",
        {"steps_range": (200, 300), "logging_steps": 20},
        RESUME_WEIGHTS_REINIT,
    ),
    (
        "lt-noclip",
        "lightning",
        {"lightning_logger": "tensorboard", "max_grad_norm": 0.0},
        WARMUP_TOO_HOT,
    ),
    (
        "nano-long-last",
        "nanogpt",
        {"steps_range": (400, 600), "plant_range": (0.92, 0.95), "log_format": "csv"},
        REPEATED_DATA,
    ),
    ("deep-llama", "trainer_llama", {"layers": 6, "hidden": 64, "heads": 4}, FROZEN_LAYER),
    (
        "sgdr-schedlost",
        "trainer_gpt2",
        {"schedule": "cosine_restarts", "warmup_fraction": 0.05},
        RESUME_SCHEDULER_LOST,
    ),
    (
        "lt-poly-early-ramp",
        "lightning",
        {
            "lightning_logger": "csv",
            "schedule": "polynomial",
            "warmup_fraction": 0.05,
            "plant_range": (0.1, 0.2),
        },
        LR_RAMP,
    ),
)
# The seventh block: what outside users' runs look like that no block has covered yet, one run
# per planted cause of spec.ALL_CAUSES. It adds no knob; besides the fifth and sixth blocks' draw
# settings a row may name "plant_length" (a repetition of that many steps, cut to end with the
# run).
SEVENTH_BLOCK: tuple[tuple[str, str, dict[str, Any], str], ...] = (
    (
        "log10-badbatch",
        "trainer_gpt2",
        {"steps_range": (200, 300), "logging_steps": 10},
        BAD_BATCH,
    ),
    (
        "nano-bf16-weakjump",
        "nanogpt",
        {"precision": "bf16", "plant_weakest": True, "log_format": "csv"},
        LR_JUMP_TRANSIENT,
    ),
    ("wsd-persistent", "trainer_llama", {"schedule": "wsd"}, LR_JUMP_PERSISTENT),
    (
        "lt-cos-late-ramp",
        "lightning",
        {"lightning_logger": "tensorboard", "schedule": "cosine", "plant_range": (0.7, 0.8)},
        LR_RAMP,
    ),
    ("lowlr-hot", "trainer_gpt2", {"peak_lr_range": (2e-4, 5e-4)}, WARMUP_TOO_HOT),
    ("adafactor-optlost", "trainer_gpt2", {"optimizer": "adafactor"}, RESUME_OPTIMIZER_LOST),
    (
        "nano-step-schedlost",
        "nanogpt",
        {"schedule": "step", "log_format": "stdout"},
        RESUME_SCHEDULER_LOST,
    ),
    (
        "nano-log5-reinit",
        "nanogpt",
        {"steps_range": (150, 250), "logging_steps": 5, "log_format": "csv"},
        RESUME_WEIGHTS_REINIT,
    ),
    (
        "llama-bf16-longrepeat",
        "trainer_llama",
        {
            "precision": "bf16",
            "steps_range": (160, 200),
            "plant_range": (0.25, 0.4),
            "plant_length": 60,
        },
        REPEATED_DATA,
    ),
    (
        "lt-accum4-csv-frozen",
        "lightning",
        {"lightning_logger": "csv", "batch_size": 4, "grad_accum": 4},
        FROZEN_LAYER,
    ),
)
