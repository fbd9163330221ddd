"""Restore a run's training state from one checkpoint, in the order its producer resumes.

Model and weights, then the optimizer (Trainer rule: with scheduler.pt only), mixed precision and
the GradScaler, the learning-rate plan, the loss normaliser, and last the RNG states, so that
nothing built here (random init of the model) consumes the restored streams.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from tscope.replay.entry import Entry
from tscope.replay.files import CheckpointFiles
from tscope.replay.logs import LoggedSeries
from tscope.replay.loop import LoopSettings
from tscope.replay.losses import DEFAULT_CAUSAL_LM, ENTRY_LOSS, MODEL_LOSS
from tscope.replay.lr_source import LrPlan, plan_learning_rates, trainer_schedule
from tscope.replay.model_build import build_model
from tscope.replay.normaliser import NormaliserRule, trainer_rule
from tscope.replay.optimizer_build import build_optimizer
from tscope.replay.rng import restore_rng

if TYPE_CHECKING:
    import torch

# Trainer's default max_grad_norm, used when training_args.bin cannot be read.
TRAINER_DEFAULT_MAX_GRAD_NORM = 1.0


@dataclass
class Restored:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    plan: LrPlan
    settings: LoopSettings
    optimizer_restored: bool
    scheduler_restored: bool
    rng_restored: bool
    scaler_restored: bool
    producer_device: str | None
    notes: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)


def restore(
    files: CheckpointFiles,
    entry: Entry,
    device: torch.device,
    logs: LoggedSeries,
    first: int,
    last: int,
    load_everything: bool = False,
) -> Restored:
    built = build_model(files, entry)
    model = built.model.to(device)
    notes, caveats = list(built.notes), []
    optimizer = build_optimizer(model, files, entry, load_everything)
    notes += optimizer.notes
    caveats += optimizer.caveats
    autocast_dtype, scaler, scaler_restored = _precision(files, device.type, notes, caveats)
    trainer = files.choice.facts.training_arguments
    schedule = None
    if trainer:
        schedule = trainer_schedule(
            files.run_config,
            files.trainer_state,
            optimizer.scheduler_state,
            optimizer.checkpoint_group_lrs,
        )
    plan = plan_learning_rates(
        first,
        last,
        logs.learning_rate,
        optimizer.checkpoint_group_lrs,
        entry.learning_rate,
        schedule,
    )
    notes += plan.notes
    caveats += plan.caveats
    loss_path = (
        ENTRY_LOSS
        if entry.loss_fn is not None
        else MODEL_LOSS
        if built.is_transformers
        else DEFAULT_CAUSAL_LM
    )
    rule = _normaliser(model, files, entry, trainer, loss_path, notes, caveats)
    settings = LoopSettings(
        device=device,
        loss_path=loss_path,
        normaliser=rule,
        max_grad_norm=_max_grad_norm(files, entry, trainer),
        steps_per_epoch=entry.steps_per_epoch if trainer else None,
        autocast_dtype=autocast_dtype,
        scaler=scaler,
    )
    rng_restored = _restore_rng(files, device.type, notes, caveats)
    return Restored(
        model=model,
        optimizer=optimizer.optimizer,
        plan=plan,
        settings=settings,
        optimizer_restored=optimizer.restored,
        scheduler_restored=optimizer.scheduler_state is not None,
        rng_restored=rng_restored,
        scaler_restored=scaler_restored,
        producer_device=_producer_device(files),
        notes=notes,
        caveats=caveats,
    )


def _normaliser(
    model: torch.nn.Module,
    files: CheckpointFiles,
    entry: Entry,
    trainer: bool,
    loss_path: str,
    notes: list[str],
    caveats: list[str],
) -> NormaliserRule | None:
    if not trainer or loss_path == DEFAULT_CAUSAL_LM:
        return None
    rule = trainer_rule(model, files.producer_version, entry.trainer_counts_shifted_labels)
    notes.append(f"loss normaliser: {rule.note}")
    if rule.caveat:
        caveats.append(rule.caveat)
    return rule


def _max_grad_norm(files: CheckpointFiles, entry: Entry, trainer: bool) -> float | None:
    """The clipping threshold: the entry's, else the run's (Trainer max_grad_norm, nanoGPT
    grad_clip), else Trainer's default 1.0; a plain loop without a setting does not clip."""
    if entry.max_grad_norm is not None:
        return entry.max_grad_norm
    config = files.run_config
    value = config.get("max_grad_norm") if trainer else config.get("grad_clip")
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value) if value > 0 else None
    return TRAINER_DEFAULT_MAX_GRAD_NORM if trainer else None


def _precision(
    files: CheckpointFiles, device_type: str, notes: list[str], caveats: list[str]
) -> tuple[torch.dtype | None, Any, bool]:
    """Autocast dtype and GradScaler of a mixed-precision run (fp16 scales its loss)."""
    import torch

    config = files.run_config
    if files.choice.facts.training_arguments:
        mode = config.get("mixed_precision")
        fp16 = config.get("fp16") is True or mode == "fp16"
        bf16 = config.get("bf16") is True or mode == "bf16"
    else:  # nanoGPT autocasts on GPU only (train.py `ctx`)
        on_gpu = str(config.get("device", "cpu")).startswith("cuda")
        fp16 = on_gpu and config.get("dtype") == "float16"
        bf16 = on_gpu and config.get("dtype") == "bfloat16"
    if not (fp16 or bf16):
        return None, None, False
    dtype = torch.float16 if fp16 else torch.bfloat16
    notes.append(f"mixed precision: autocast to {str(dtype).removeprefix('torch.')}")
    if not fp16:
        return dtype, None, False
    scaler = torch.amp.GradScaler(device_type)
    state = files.scaler_state()
    if state is None:
        caveats.append("fp16 run without scaler.pt: the loss scale restarts from its default")
        return dtype, scaler, False
    scaler.load_state_dict(state)
    notes.append(f"GradScaler restored from {files.choice.shown}/scaler.pt")
    return dtype, scaler, True


def _restore_rng(
    files: CheckpointFiles, device_type: str, notes: list[str], caveats: list[str]
) -> bool:
    state, name = files.rng_state()
    if state is None:
        caveats.append(
            f"{files.choice.shown} holds no RNG state: dropout masks and other random draws are "
            "not the ones the original run made (a model without dropout is unaffected)"
        )
        return False
    restored = restore_rng(state, device_type)
    notes.append(f"RNG restored from {name}: {', '.join(restored)}")
    if name != "rng_state.pth":
        caveats.append(f"a multi-process run: only rank 0's RNG ({name}) is replayed")
    return True


def _producer_device(files: CheckpointFiles) -> str | None:
    config = files.run_config
    device: Any = config.get("device")  # nanoGPT
    state = config.get("distributed_state")
    if isinstance(state, dict):
        device = state.get("device", device)
    device = device or config.get("_setup_devices")
    return str(device).split(":")[0] if isinstance(device, str) and device else None
