"""What a resume from a Hugging Face Trainer `checkpoint-N/` restores, and what it does not: the
ResumeAudit of tscope.ingest.checkpoints.hf_trainer.HfTrainerCheckpoint (DOMAIN.md §A.1).

Only facts the folder shows: which resume files loaded (the handle checked them when it opened),
the optimizer's summary, the settings recovered from training_args.bin, the dtypes of the weights,
and the sibling checkpoints' files. Nothing here reads a tensor.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tscope.ingest.checkpoints.optimizer_summary import summarize_optimizer
from tscope.ingest.safe_fs import is_real_folder, is_regular_file
from tscope.model.checkpoint import ResumeAudit


@dataclass(frozen=True)
class TrainerResumeFiles:
    """What HfTrainerCheckpoint found in the folder, passed in whole."""

    folder: Path
    # The folder holding the sibling checkpoint-*/ folders; None when it lies outside the input
    # (then it is neither listed nor read).
    run_dir: Path | None
    training_args: Mapping[str, Any]  # {} when training_args.bin held none
    optimizer_raw: Any  # the loaded optimizer.pt, None when absent or refused
    has_optimizer_file: bool
    has_weights: bool
    has_scheduler: bool  # scheduler.pt exists and loads
    has_scaler_file: bool  # scaler.pt exists and loads
    rng_ranks: tuple[int, ...]  # ranks whose rng_state file loads
    rng_file_names: Mapping[int, str]  # rank → rng_state file name, loadable or not
    weight_dtypes: tuple[str, ...]  # the stored dtypes ("F16", "float16", …)
    handle_notes: tuple[str, ...]  # what opening the folder noted (the optimizer id mapping)


def trainer_resume_audit(files: TrainerResumeFiles) -> ResumeAudit:
    raw = files.optimizer_raw
    summary = summarize_optimizer(raw)
    notes = list(summary.notes) if raw is not None else []
    args = files.training_args
    if not files.has_optimizer_file:
        notes.append("no optimizer.pt: a resume restarts the optimizer (zero moments, step 0)")
    if args.get("save_only_model") is True:
        notes.append("save_only_model=True: optimizer, scheduler, scaler and RNG not saved")
    notes.append(
        "the Trainer saves no sampler state: a resume skips the epoch's consumed batches and "
        "reshuffles from the restored RNG"
        + (
            " (ignore_data_skip=True: it re-reads the epoch)"
            if args.get("ignore_data_skip")
            else ""
        )
    )
    notes.extend(_layout_notes(files.folder))
    return ResumeAudit(
        has_weights=files.has_weights,
        has_optimizer_moments=raw is not None and summary.has_moments,
        has_step_counters=raw is not None and summary.has_step_counters,
        has_scheduler=files.has_scheduler,
        has_scaler=_scaler(files, notes),
        rng_ranks=files.rng_ranks,
        expected_ranks=_expected_ranks(files),
        has_sampler_state=None,
        notes=tuple(files.handle_notes) + tuple(notes),
    )


def _scaler(files: TrainerResumeFiles, notes: list[str]) -> bool | None:
    """True with scaler.pt; False when the run used fp16 loss scaling and it is missing."""
    if files.has_scaler_file:
        return True
    evidence = []
    if files.training_args.get("fp16") is True:
        evidence.append("training_args fp16=True")
    if any(dtype == "F16" or dtype == "float16" for dtype in files.weight_dtypes):
        evidence.append("fp16 weights")
    sibling = _sibling_with_scaler(files.run_dir) if files.run_dir is not None else None
    if sibling is not None:
        evidence.append(f"{sibling} has scaler.pt")
    if not evidence:  # the siblings not looked at are listed in partial (HfTrainerCheckpoint)
        return None
    notes.append("GradScaler state expected (" + ", ".join(evidence) + ") but scaler.pt is missing")
    return False


def _sibling_with_scaler(run_dir: Path) -> str | None:
    """The first checkpoint-*/ folder in run_dir holding scaler.pt. lstat only: a linked folder
    or file is not followed (it may lead outside the input), as discovery does not."""
    try:
        names = sorted(entry.name for entry in run_dir.iterdir())
    except OSError:
        return None
    for name in names:
        folder = run_dir / name
        if (
            name.startswith("checkpoint-")
            and is_real_folder(folder)
            and is_regular_file(folder / "scaler.pt")
        ):
            return name
    return None


def _expected_ranks(files: TrainerResumeFiles) -> int | None:
    """World size: training_args' accelerate state, else the rank files, else one process."""
    state = files.training_args.get("distributed_state")
    processes = state.get("num_processes") if isinstance(state, dict) else None
    if isinstance(processes, int) and processes >= 1:
        return processes
    ranks = files.rng_file_names
    if any(name != "rng_state.pth" for name in ranks.values()):
        return max(ranks) + 1
    return 1 if ranks else None


def _layout_notes(folder: Path) -> list[str]:
    notes = []
    if any(folder.glob("global_step*")):
        notes.append("DeepSpeed state in global_step*/ holds the optimizer and scheduler")
    if any(folder.glob("pytorch_model_fsdp*")) or any(folder.glob("optimizer_*")):
        notes.append("FSDP sharded state (pytorch_model_fsdp_*/, optimizer_*/) is not read here")
    return notes
