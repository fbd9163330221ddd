"""The robustness sweep's variants: the fixture runs with another seed, schedule, logging interval,
planted step or strength (see robustness_sweep.py for what each is scored on)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from sweep_fixtures import (
    SEED,
    TOTAL_STEPS,
    WARMUP_STEPS,
    Phase,
    RunSpec,
    planted,
    text_corpus,
)

# ---------------------------------------------------------------------------------------------
# Schedules the fixture specs do not have (passed as RunSpec.lr_multiplier -> custom LambdaLR)
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class LinearDecay:
    """Linear warmup, then linear decay to 0 at `total_steps` (the Trainer's "linear")."""

    warmup_steps: int
    total_steps: int

    def __call__(self, scheduler_step: int) -> float:
        if scheduler_step < self.warmup_steps:
            return float(scheduler_step) / float(max(1, self.warmup_steps))
        remaining = self.total_steps - scheduler_step
        return max(0.0, float(remaining) / float(max(1, self.total_steps - self.warmup_steps)))


@dataclass(frozen=True)
class ConstantWithWarmup:
    """Linear warmup, then the peak LR to the end (the Trainer's "constant_with_warmup")."""

    warmup_steps: int

    def __call__(self, scheduler_step: int) -> float:
        if scheduler_step < self.warmup_steps:
            return float(scheduler_step) / float(max(1, self.warmup_steps))
        return 1.0


@dataclass(frozen=True)
class ScaledCosine:
    """The fixtures' warmup + cosine, times `scale` throughout (a hotter but healthy run)."""

    warmup_steps: int
    total_steps: int
    scale: float

    def __call__(self, scheduler_step: int) -> float:
        base = planted.warmup_cosine_multiplier(scheduler_step, self.warmup_steps, self.total_steps)
        return float(self.scale * base)


# ---------------------------------------------------------------------------------------------
# The variants
# ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Variant:
    spec: RunSpec
    seed: int
    cause: str | None  # corrupted_batch, lr_jump, lr_runaway, resume_no_scheduler; None = control
    step: int | None  # the first optimizer step the cause acts on (resume: the checkpoint's step)
    strength: str
    expected: tuple[str, ...]  # categories a correct analysis raises (what "hit" checks)
    related: tuple[int, int] | None = None  # steps a warning/critical may sit at on a planted run
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def name(self) -> str:
        return str(self.spec.name)

    @property
    def target(self) -> int | None:
        """The logged step that shows the planted step: with logging_steps L, the logged step k
        averages steps k-L+1..k (loss) or reports step k (LR, grad_norm)."""
        if self.step is None:
            return None
        every = int(self.spec.logging_steps)
        return math.ceil(self.step / every) * every


def _control(name: str, seed: int, description: str, **spec_options: Any) -> Variant:
    spec = RunSpec(
        name=name,
        description=description,
        planted_cause=None,
        expected_categories=(),
        **spec_options,
    )
    return Variant(spec=spec, seed=seed, cause=None, step=None, strength="-", expected=())


def _corrupted(
    name: str, seed: int, step: int, in_batch: tuple[int, ...], logging_steps: int = 1
) -> Variant:
    corruption = planted.BatchCorruption(
        optimizer_step=step,
        in_batch_indices=in_batch,
        generator_seed=7,
        vocab_size=len(text_corpus.VOCABULARY),
    )
    spec = RunSpec(
        name=name,
        description=f"{len(in_batch)} samples of step {step}'s batch replaced by random tokens",
        planted_cause="corrupted_batch",
        expected_categories=("loss_spike", "bad_batch"),
        corruption=corruption,
        logging_steps=logging_steps,
    )
    return Variant(
        spec=spec,
        seed=seed,
        cause="corrupted_batch",
        step=step,
        strength=f"{len(in_batch)}/24 samples",
        expected=("loss_spike",),
        related=(step - 2, step + 10 + logging_steps),
        notes=("bad_batch is reserved for replay; offline, loss_spike is the finding",),
    )


def _lr_jump(
    name: str, seed: int, step: int, window: int, factor: float, logging_steps: int = 1
) -> Variant:
    multiplier = planted.LrJump(
        warmup_steps=WARMUP_STEPS,
        total_steps=TOTAL_STEPS,
        first_step=step,
        window_steps=window,
        factor=factor,
    )
    spec = RunSpec(
        name=name,
        description=f"cosine ×{factor:g} for steps {step}-{step + window - 1}",
        planted_cause="lr_jump",
        expected_categories=("lr_schedule_jump", "loss_spike"),
        lr_multiplier=multiplier,
        logging_steps=logging_steps,
    )
    return Variant(
        spec=spec,
        seed=seed,
        cause="lr_jump",
        step=step,
        strength=f"×{factor:g} for {window} step{'s' if window > 1 else ''}",
        expected=("lr_schedule_jump",),
        related=(step - 2, step + window + 30 + logging_steps),
    )


def _lr_runaway(name: str, seed: int, ramp_step: int, growth: float) -> Variant:
    multiplier = planted.LrRunaway(
        warmup_steps=WARMUP_STEPS, ramp_first_step=ramp_step, growth_per_step=growth
    )
    spec = RunSpec(
        name=name,
        description=f"LR ×{growth:g} every step from step {ramp_step}",
        planted_cause="lr_blowup",
        expected_categories=("lr_too_high", "loss_divergence", "nan_loss", "nonfinite_weights"),
        lr_multiplier=multiplier,
    )
    return Variant(
        spec=spec,
        seed=seed,
        cause="lr_runaway",
        step=ramp_step,
        strength=f"×{growth:g}/step",
        expected=("loss_divergence", "lr_too_high|lr_schedule_jump"),
        related=(ramp_step - 2, TOTAL_STEPS),
    )


def _resume(
    name: str, seed: int, resume_step: int, crash_after: int, delete_scheduler: bool
) -> Variant:
    checkpoint = f"checkpoint-{resume_step}"
    deleted = [f"{checkpoint}/scheduler.pt"] if delete_scheduler else []
    spec = RunSpec(
        name=name,
        description=f"killed after step {crash_after}, resumed from {checkpoint}"
        + (" without its scheduler.pt" if delete_scheduler else " (nothing deleted)"),
        planted_cause="resume_lr_restart" if delete_scheduler else None,
        expected_categories=(
            ("resume_discontinuity", "optimizer_state_reset", "checkpoint_incomplete")
            if delete_scheduler
            else ()
        ),
        phases=(
            Phase("first", crash_after_step=crash_after),
            Phase("resume", resume_from_checkpoint=checkpoint),
        ),
        planted={"deleted_files": deleted},
    )
    if not delete_scheduler:
        return Variant(
            spec=spec,
            seed=seed,
            cause=None,
            step=resume_step,
            strength=f"crash after {crash_after}, nothing deleted",
            expected=(),
            notes=("control: resume_discontinuity may be info only",),
        )
    return Variant(
        spec=spec,
        seed=seed,
        cause="resume_no_scheduler",
        step=resume_step,
        strength=f"crash after {crash_after}, scheduler.pt deleted",
        expected=spec.expected_categories,
        related=(resume_step - 2, TOTAL_STEPS),
    )


def build_variants() -> dict[str, Variant]:
    variants = (
        _control("control_seed1", 1, "stable, seed 1"),
        _control("control_seed2", 2, "stable, seed 2"),
        _control("control_log10_seed3", 3, "stable, seed 3, logging_steps=10", logging_steps=10),
        _control(
            "control_linear",
            SEED,
            "warmup + linear decay (custom LambdaLR)",
            lr_multiplier=LinearDecay(WARMUP_STEPS, TOTAL_STEPS),
        ),
        _control(
            "control_constant_seed4",
            4,
            "warmup + constant LR (custom LambdaLR), seed 4",
            lr_multiplier=ConstantWithWarmup(WARMUP_STEPS),
        ),
        _corrupted("corrupt_s80_6of24", SEED, 80, (2, 5, 11, 13, 17, 22)),
        _corrupted("corrupt_s200_3of24_seed2", 2, 200, (4, 11, 19)),
        _corrupted("corrupt_s145_24of24", SEED, 145, tuple(range(24))),
        _lr_jump("lr_jump_x10_s100", SEED, 100, 5, 10.0),
        _lr_jump("lr_jump_x20_s190_w1_seed1", 1, 190, 1, 20.0),
        _lr_runaway("lr_runaway_x1.05_s100", SEED, 100, 1.05),
        _resume("resume_nosched_ckpt180", SEED, 180, 205, delete_scheduler=True),
        _resume("resume_benign_ckpt120", SEED, 120, 165, delete_scheduler=False),
        # Edges: weaker, earlier, sparser, hotter.
        _control(
            "control_hot_lr_x2_seed5",
            5,
            "warmup + cosine at twice the peak LR (6e-3, custom LambdaLR), seed 5",
            lr_multiplier=ScaledCosine(WARMUP_STEPS, TOTAL_STEPS, 2.0),
        ),
        _corrupted("corrupt_s145_1of24", SEED, 145, (11,)),
        _corrupted("corrupt_s20_6of24_warmup", SEED, 20, (2, 5, 11, 13, 17, 22)),
        _corrupted("corrupt_s145_6of24_log10", SEED, 145, (2, 5, 11, 13, 17, 22), 10),
        _lr_jump("lr_jump_x2_s120", SEED, 120, 5, 2.0),
        _lr_jump("lr_jump_x10_s15_warmup_seed2", 2, 15, 5, 10.0),
        _lr_jump("lr_jump_x10_s148_log10", SEED, 148, 5, 10.0, logging_steps=10),
        _lr_runaway("lr_runaway_x1.03_s60_seed2", 2, 60, 1.03),
        _resume("resume_nosched_ckpt60_seed2", 2, 60, 100, delete_scheduler=True),
    )
    return {variant.name: variant for variant in variants}
