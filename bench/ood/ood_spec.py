"""The out-of-distribution set: runs whose setups the accuracy benchmark never draws (the
setups' tables are in ood_blocks.py; this module draws each run from them).

The benchmark (bench/accuracy/spec.py) trains with AdamW, linear/cosine/constant schedules after a
linear warm-up, fp32 or bf16, 100–200 steps, a loss logged every step and no evaluation; tscope's
rules were tuned on it. Each setup here changes one or two of those things (a schedule the
benchmark lacks, averaged logging, fp16 with a GradScaler, another optimizer, a long run, an
evaluation loop, a larger model) and is trained twice: once healthy and once with one planted
cause, drawn at a random step and strength by the benchmark's own `_plant`. The producers,
planting, scoring and cause windows are the benchmark's (imported); only the draw is new.
Blocks are numbered by when they were added; their setup tables, each with a comment saying
what it covers, are in ood_blocks.py and ood_blocks_late.py, and their scores in docs/accuracy-ood.md. The first two
(`SETUPS`, `SECOND_BLOCK`, ood00–49) are built by default. Every later block (the third,
`THIRD_BLOCK`, ood50–69, to the twelfth, `TWELFTH_BLOCK`, ood222–241) is held out: built only by
`build_ood_specs(blocks=(..., N))` and trained or scored only by `run.py --blocks N`, trained by
someone who does not analyze it, scored once as an honest out-of-distribution number, and spent
after. From the third on, each block plants each cause of spec.ALL_CAUSES once, except the
eighth, which asks one question (an LR ramp on a decaying schedule, where the decay partly
cancels it).

A healthy run here is a control exactly as in the benchmark: no warning may fire. An LR restart or
a step-decay drop that the schedule itself does is part of the run, not an incident.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, replace
from typing import Any

import paths  # noqa: F401  (puts bench/accuracy and fixtures on sys.path)
from ood_blocks import (
    FIFTH_BLOCK,
    FIFTH_BLOCK_KNOBS,
    FOURTH_BLOCK,
    FOURTH_BLOCK_KNOBS,
    SECOND_BLOCK,
    SECOND_BLOCK_KNOBS,
    SETUPS,
    SEVENTH_BLOCK,
    SIXTH_BLOCK,
    THIRD_BLOCK,
    THIRD_BLOCK_KNOBS,
)
from ood_blocks_late import (
    EIGHTH_BLOCK,
    ELEVENTH_BLOCK,
    NINTH_BLOCK,
    TENTH_BLOCK,
    TWELFTH_BLOCK,
)
from spec import (
    BAD_BATCH,
    CONTROL,
    FIXED_KNOBS,
    LR_JUMP_PERSISTENT,
    LR_JUMP_TRANSIENT,
    LR_RAMP,
    REPEATED_DATA,
    RESUME_OPTIMIZER_LOST,
    WARMUP_TOO_HOT,
    RunSpec,
    _log_uniform,
    _plant,
    _seed,
)

# Bumped whenever a setup's draw changes (it is in every key through `plant`/fields anyway).
OOD_VERSION = 1
OOD_CAUSES = (
    LR_JUMP_TRANSIENT,
    LR_JUMP_PERSISTENT,
    BAD_BATCH,
    RESUME_OPTIMIZER_LOST,
    WARMUP_TOO_HOT,
)
# A fresh SGD loses only its momentum buffer at a resume (no second moment to rebuild): the
# planted "optimizer lost" is drawn only for adaptive optimizers, where it is what users meet.
ADAPTIVE_OPTIMIZERS = frozenset({"adamw", "adafactor"})


@dataclass(frozen=True)
class OodSpec(RunSpec):
    """A benchmark spec plus the knobs only this set varies (spec.FIXED_KNOBS) and its setup."""

    setup: str = ""
    logging_steps: int = 1
    optimizer: str = "adamw"
    eval_every: int = 0
    # The second block's knobs (spec.FIXED_KNOBS); left out of the JSON (so of the cache key) at
    # their defaults, which keeps the first block's keys.
    lightning_logger: str = ""
    log_format: str = ""
    resumes: int = 0
    # The third block's knobs (spec.FIXED_KNOBS), left out of the JSON at their defaults too.
    adam_beta2: float | None = None
    weight_decay: float | None = None
    max_grad_norm: float | None = None
    dropout: float = 0.0
    block_size: int = 0
    vocab_size: int = 0
    logging_first_step: bool = False
    report_to: str = ""
    # The fourth block's knobs (spec.FIXED_KNOBS), left out of the JSON at their defaults too.
    kv_heads: int = 0
    tie_word_embeddings: bool | None = None
    gradient_checkpointing: bool = False
    adam_epsilon: float | None = None
    save_total_limit: int | None = None
    # The fifth block's knobs (spec.FIXED_KNOBS), left out of the JSON at their defaults too.
    epochs: int = 0
    label_smoothing: float = 0.0
    corpus: str = ""

    def to_json(self) -> dict[str, Any]:
        payload = super().to_json()
        knobs = SECOND_BLOCK_KNOBS + THIRD_BLOCK_KNOBS + FOURTH_BLOCK_KNOBS + FIFTH_BLOCK_KNOBS
        for name in knobs:
            if payload[name] == FIXED_KNOBS[name]:
                del payload[name]
        return payload

    @property
    def name(self) -> str:
        return f"ood{self.index:02d}-{self.setup}-{self.producer}-{self.cause}"

    @property
    def split(self) -> str:
        return "ood"

    @staticmethod
    def from_json(payload: dict[str, Any]) -> OodSpec:
        return OodSpec(**payload)


THIRD_BLOCK_STEPS = (100, 160)
SECOND_BLOCK_STEPS = (100, 160)  # shorter than the first block's: each run trains in ≤ ~20 s
LONG_STEPS = (800, 1500)  # the "long" setup's range (the benchmark draws 100–200)
SGD_LR = (0.05, 0.3)  # SGD with momentum needs a larger LR than AdamW's 1e-3–4e-3
ADAFACTOR_LR = (2e-3, 1e-2)


def _training(setup: str, producer: str, change: dict[str, Any], rng: random.Random) -> dict:
    steps = rng.randrange(120, 241, 10)
    if change.get("steps") == "long":
        steps = rng.randrange(LONG_STEPS[0], LONG_STEPS[1] + 1, 100)
    training: dict[str, Any] = {
        "model": {"trainer_gpt2": "gpt2", "trainer_llama": "llama"}.get(producer, "nanogpt"),
        "hidden": rng.choice((32, 48)),
        "layers": 2,
        "heads": 2,
        "steps": steps,
        "batch_size": rng.choice((4, 8, 8, 16)) if steps < 500 else 4,
        "grad_accum": rng.choice((1, 1, 2)) if steps < 500 else 1,
        "schedule": rng.choice(("cosine", "linear")),
        "warmup_steps": rng.choice((10, 20, 30)) if steps < 500 else rng.choice((50, 100)),
        "peak_lr": round(_log_uniform(rng, 1e-3, 4e-3), 6),
        "precision": "fp32",
        "save_every": steps // 4,
        "data_order": "shuffled",
        "logging_steps": 1,
        "optimizer": "adamw",
        "eval_every": 0,
    }
    training.update({k: v for k, v in change.items() if k != "steps"})
    if training["optimizer"] == "sgd":
        training["peak_lr"] = round(_log_uniform(rng, *SGD_LR), 4)
    elif training["optimizer"] == "adafactor":
        training["peak_lr"] = round(_log_uniform(rng, *ADAFACTOR_LR), 5)
    _saves_on_logged_steps(training)
    return training


def _saves_on_logged_steps(training: dict[str, Any]) -> None:
    """Checkpoints fall on logged steps, as users set them."""
    if training["logging_steps"] > 1:
        every = training["logging_steps"]
        training["save_every"] = max(every, training["save_every"] // every * every)


def _paired_draws(
    first_index: int, table: tuple[tuple[str, str, dict[str, Any], str], ...]
) -> Iterator[tuple[int, int, random.Random, str, str, dict[str, Any], str]]:
    """(index, seed, rng, setup, producer, change, cause) of each setup's control, then its run
    with the planted cause, at consecutive indices from `first_index`."""
    for number, (setup, producer, change, planted) in enumerate(table):
        for control in (True, False):
            index = first_index + 2 * number + (0 if control else 1)
            seed = _seed(producer, f"ood-{setup}-v{OOD_VERSION}", index)
            cause = CONTROL if control else planted
            yield index, seed, random.Random(seed), setup, producer, change, cause


def _second_block(first_index: int) -> list[OodSpec]:
    specs: list[OodSpec] = []
    for index, seed, rng, setup, producer, change, cause in _paired_draws(
        first_index, SECOND_BLOCK
    ):
        training = _training(setup, producer, change, rng)
        training["steps"] = rng.randrange(SECOND_BLOCK_STEPS[0], SECOND_BLOCK_STEPS[1] + 1, 10)
        if training["grad_accum"] == 4:
            training["batch_size"] = 4
        training["save_every"] = training["steps"] // 4
        _saves_on_logged_steps(training)
        specs.append(_drawn_spec(producer, index, seed, setup, training, cause, rng))
    return specs


def _third_block(
    first_index: int, table: tuple[tuple[str, str, dict[str, Any], str], ...] = THIRD_BLOCK
) -> list[OodSpec]:
    """The third block's draw (100–160 steps, a bad batch of at least a quarter of the rows);
    the fourth block is drawn the same way from its own table."""
    specs: list[OodSpec] = []
    for index, seed, rng, setup, producer, change, cause in _paired_draws(first_index, table):
        knobs = {k: v for k, v in change.items() if k != "warmup_fraction"}
        training = _training(setup, producer, knobs, rng)
        training["steps"] = rng.randrange(THIRD_BLOCK_STEPS[0], THIRD_BLOCK_STEPS[1] + 1, 10)
        _warm_up_and_saves(training, change)
        spec = _drawn_spec(producer, index, seed, setup, training, cause, rng)
        specs.append(_quarter_of_the_rows(spec))
    return specs


def _warm_up_and_saves(training: dict[str, Any], change: dict[str, Any]) -> None:
    """The row's warm-up fraction of the drawn steps, and four saves on logged steps."""
    if "warmup_fraction" in change:
        training["warmup_steps"] = int(training["steps"] * change["warmup_fraction"])
    training["save_every"] = training["steps"] // 4
    _saves_on_logged_steps(training)


def _quarter_of_the_rows(spec: OodSpec) -> OodSpec:
    """A planted bad batch corrupts at least a quarter of the step's rows: one row of many rarely
    shows in the log."""
    if spec.cause != BAD_BATCH:
        return spec
    rows = max(int(spec.plant["rows"]), -(-int(spec.plant["of_rows"]) // 4))
    return replace(spec, plant={**spec.plant, "rows": rows})


# The fifth block's draw settings that are no spec field (see ood_blocks.FIFTH_BLOCK), and the
# sixth and seventh blocks' besides (ood_blocks.SIXTH_BLOCK, ood_blocks.SEVENTH_BLOCK).
FIFTH_BLOCK_DRAWS = ("steps", "warmup_fraction", "peak_lr_range", "plant_late", "plant_weakest")
SIXTH_BLOCK_DRAWS = ("steps_range", "plant_range", "plant_rows")
SEVENTH_BLOCK_DRAWS = ("plant_length",)
LATE_FRACTION = 0.85  # "plant_late": the planted step in the last 15% of the run
# "plant_weakest": each strength at the weakest value `spec._plant` draws.
WEAKEST = {"factor": 3.0, "window": 1, "growth": 1.04, "lr_factor": 8.0, "length": 10}
# "plant_range" moves the step of the causes that act at a step of their own choosing.
MOVABLE_CAUSES = frozenset(
    {BAD_BATCH, LR_JUMP_TRANSIENT, LR_JUMP_PERSISTENT, LR_RAMP, REPEATED_DATA}
)


def _fifth_block(
    first_index: int, table: tuple[tuple[str, str, dict[str, Any], str], ...] = FIFTH_BLOCK
) -> list[OodSpec]:
    """The fifth block's draw: the third block's (100–160 steps unless the row fixes them, a bad
    batch of at least a quarter of the rows) plus the row's draw settings; the sixth, seventh and
    eighth blocks are drawn the same way from their own tables (their settings draw nothing in a row
    that lacks them)."""
    specs: list[OodSpec] = []
    draws = FIFTH_BLOCK_DRAWS + SIXTH_BLOCK_DRAWS + SEVENTH_BLOCK_DRAWS
    for index, seed, rng, setup, producer, change, cause in _paired_draws(first_index, table):
        knobs = {k: v for k, v in change.items() if k not in draws}
        training = _training(setup, producer, knobs, rng)
        steps = int(change.get("steps") or 0)
        if "steps_range" in change:
            low, high = change["steps_range"]
            steps = rng.randrange(int(low), int(high) + 1, 10)
        training["steps"] = steps or rng.randrange(
            THIRD_BLOCK_STEPS[0], THIRD_BLOCK_STEPS[1] + 1, 10
        )
        epochs = int(training.get("epochs", 0))
        if epochs:  # whole epochs of a small dataset
            training["steps"] -= training["steps"] % epochs
        if "peak_lr_range" in change:
            training["peak_lr"] = round(_log_uniform(rng, *change["peak_lr_range"]), 6)
        _warm_up_and_saves(training, change)
        spec = _quarter_of_the_rows(_drawn_spec(producer, index, seed, setup, training, cause, rng))
        if cause != CONTROL and change.get("plant_late"):
            late = rng.randrange(int(spec.steps * LATE_FRACTION) + 1, spec.steps - 1)
            spec = replace(spec, plant={**spec.plant, "step": late})
        if cause == REPEATED_DATA and "plant_length" in change:
            spec = replace(spec, plant={**spec.plant, "length": int(change["plant_length"])})
        if cause != CONTROL and "plant_range" in change:
            spec = _planted_in_range(spec, change["plant_range"], rng)
        if cause == REPEATED_DATA and "plant_length" in change:  # ends with the run at the latest
            length = min(int(spec.plant["length"]), spec.steps - int(spec.plant["step"]) + 1)
            spec = replace(spec, plant={**spec.plant, "length": length})
        if cause != CONTROL and change.get("plant_weakest"):
            weakest = {k: v for k, v in WEAKEST.items() if k in spec.plant}
            spec = replace(spec, plant={**spec.plant, **weakest})
        if cause == BAD_BATCH and "plant_rows" in change:
            spec = replace(spec, plant={**spec.plant, "rows": int(change["plant_rows"])})
        specs.append(spec)
    return specs


def _planted_in_range(spec: OodSpec, fractions: tuple[float, float], rng: random.Random) -> OodSpec:
    """The planted step drawn in those fractions of the run ("plant_range"); a repetition that
    would outlast the run is cut to end with it."""
    if spec.cause not in MOVABLE_CAUSES:
        raise ValueError(f"{spec.cause} is planted at a step of its own (no plant_range)")
    step = rng.randrange(int(spec.steps * fractions[0]), int(spec.steps * fractions[1]))
    plant = {**spec.plant, "step": step}
    if "length" in plant:
        plant["length"] = min(int(plant["length"]), spec.steps - step + 1)
    return replace(spec, plant=plant)


def build_ood_specs(blocks: tuple[int, ...] = (1, 2)) -> list[OodSpec]:
    """The first block (SETUPS, indices 0–31), the second (SECOND_BLOCK, 32–49) and, only when
    asked for, the third (THIRD_BLOCK, 50–69), the fourth (FOURTH_BLOCK, 70–89), the fifth
    (FIFTH_BLOCK, 90–109), the sixth (SIXTH_BLOCK, 110–129), the seventh (SEVENTH_BLOCK,
    130–149), the eighth (EIGHTH_BLOCK, 150–161), the ninth (NINTH_BLOCK, 162–181), the tenth
    (TENTH_BLOCK, 182–201), the eleventh (ELEVENTH_BLOCK, 202–221) and the twelfth
    (TWELFTH_BLOCK, 222–241), all held out (see the
    module's docstring)."""
    first = _first_block()
    second = _second_block(len(first))
    specs = (first if 1 in blocks else []) + (second if 2 in blocks else [])
    third_index = len(first) + len(second)
    # Blocks 3 on sit one after another from third_index, each twice its table's length (every
    # setup trained healthy and planted); the third and fourth are drawn by _third_block, the
    # later ones by _fifth_block.
    tables = (
        THIRD_BLOCK,
        FOURTH_BLOCK,
        FIFTH_BLOCK,
        SIXTH_BLOCK,
        SEVENTH_BLOCK,
        EIGHTH_BLOCK,
        NINTH_BLOCK,
        TENTH_BLOCK,
        ELEVENTH_BLOCK,
        TWELFTH_BLOCK,
    )
    first_index = third_index
    for block, table in enumerate(tables, start=3):
        if block in blocks:
            draw = _third_block if block <= 4 else _fifth_block
            specs += draw(first_index, table)
        first_index += 2 * len(table)
    return specs


def _first_block() -> list[OodSpec]:
    specs: list[OodSpec] = []
    for number, (setup, producer, change) in enumerate(SETUPS):
        for control in (True, False):
            index = 2 * number + (0 if control else 1)
            seed = _seed(producer, f"ood-{setup}-v{OOD_VERSION}", index)
            rng = random.Random(seed)
            training = _training(setup, producer, change, rng)
            cause = CONTROL
            if not control:
                choices = [
                    c
                    for c in OOD_CAUSES
                    if c != RESUME_OPTIMIZER_LOST or training["optimizer"] in ADAPTIVE_OPTIMIZERS
                ]
                cause = choices[number % len(choices)]
            specs.append(_drawn_spec(producer, index, seed, setup, training, cause, rng))
    return specs


def _drawn_spec(
    producer: str,
    index: int,
    seed: int,
    setup: str,
    training: dict[str, Any],
    cause: str,
    rng: random.Random,
) -> OodSpec:
    """The run, with its planted cause drawn by the benchmark's `_plant` (none for a control)."""
    plant: dict[str, Any] = {}
    if cause != CONTROL:
        schedule = training["schedule"]
        plant = _plant(cause, training, rng)
        if cause == WARMUP_TOO_HOT:
            # The benchmark's draw makes the schedule constant; here the setup's schedule is
            # kept with no warm-up, so only the start is too hot for it.
            training["schedule"] = schedule
    return OodSpec(
        producer=producer,
        index=index,
        seed=seed,
        cause=cause,
        plant=plant,
        setup=setup,
        **training,
    )
