"""The checkpoint reader interface: lazy, read-only, one tensor at a time, never unsafe pickles."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol, Self, runtime_checkable

from tscope.ingest.safe_fs import is_inside
from tscope.model import CheckpointInfo, PartialInput
from tscope.model.checkpoint import ResumeAudit

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class LoadOptions:
    # Legacy pickles (training_args.bin, old .bin/.pt files with custom classes) are refused
    # unless the user says they trust the file: loading them executes code.
    trust_pickle: bool = False


@dataclass
class OptimizerState:
    """Adam(W) state keyed by parameter name (mapped from the producer's integer ids)."""

    # name -> {"exp_avg": Tensor, "exp_avg_sq": Tensor, "step": float}; absent names got no grad
    per_param: dict[str, dict[str, Any]] = field(default_factory=dict)
    # hyper-parameters per group, without the "params" id lists
    param_groups: list[dict[str, Any]] = field(default_factory=list)
    group_of: dict[str, int] = field(default_factory=dict)  # parameter name -> group index
    # state entries that could not be given a name, each with the reason (shape mismatch, ...)
    unmapped: list[str] = field(default_factory=list)
    # values of the wrong kind (a step counter in text, a moment that is no array), ignored: the
    # case lists them as partial
    malformed: list[str] = field(default_factory=list)
    # parameters the file holds per-coordinate state for, mapped to names or not (None: unknown)
    held_entries: int | None = None
    # fp32 master weights when the producer keeps them apart (DeepSpeed), by parameter name
    master_weights: dict[str, Any] | None = None
    # the largest step counter among all entries, named or not (None: none, or not read): a
    # reset shows in the counter whether or not the entries could be named
    largest_step: float | None = None


class CheckpointHandle(Protocol):
    """An opened checkpoint. Nothing is loaded until asked; tensors come one at a time."""

    info: CheckpointInfo
    partial: list[PartialInput]

    def tensor_names(self) -> list[str]:
        """Model parameter names, normalized (no `_orig_mod.` / `module.` prefixes), sorted."""
        ...

    def load_tensor(self, name: str) -> torch.Tensor:
        """One parameter on CPU in its stored dtype. Raises UnreadableInput if it cannot be read."""
        ...

    def optimizer_state(self) -> OptimizerState | None:
        """The optimizer state mapped to names, or None when the checkpoint has none."""
        ...

    def audit(self) -> ResumeAudit: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class TorchFileKeys:
    """Where a one-file checkpoint (one pickled dict: nanoGPT's ckpt.pt, a Lightning .ckpt) keeps
    what a replay restores."""

    weights: str  # the model's state dict
    model_args: str  # what the entry's build_model receives
    run_config: str | None  # the training settings; None: the file holds none
    optimizer: str  # Optimizer.state_dict()
    scheduler: str | None  # the LR scheduler's state_dict(); None: the file holds none
    # One state per optimizer (and scheduler) in a list, as Lightning's optimizer_states[0]; a
    # replay restores one.
    states_in_lists: bool = False


@dataclass(frozen=True)
class ReplayFacts:
    """What `tscope replay` must know of the producer that wrote a layout (None on a reader:
    the layout is not replayed)."""

    # The first update after the state of checkpoint N is N + this: 1 where N counts finished
    # updates (Trainer checkpoint-N/, DCP step folders), 0 where the state precedes update N
    # (nanoGPT's iter_num, Lightning's step=N.ckpt in its loggers' numbering).
    next_update_offset: int
    # A folder with the producer's side files (config.json, scheduler.pt, scaler.pt,
    # rng_state*.pth, trainer_state.json, training_args.bin), not one torch file.
    folder_with_side_files: bool = False
    # The model is a transformers one, built from the checkpoint's config.json.
    model_from_config_json: bool = False
    # The settings are TrainingArguments: precision (fp16/bf16), optim, max_grad_norm (default
    # 1.0), the LR scheduler, the loss normaliser of Trainer.compute_loss.
    training_arguments: bool = False
    # Trainer._load_optimizer_and_scheduler: the optimizer resumes only with the scheduler.
    resumes_optimizer_with_scheduler: bool = False
    # The log's loss at a logging step is the mean since the previous one, with non-finite
    # steps filtered unless logging_nan_inf_filter is off (the Trainer's logging).
    trainer_logging: bool = False
    sharded: bool = False  # replayed on N processes (--nproc), never in one
    # A one-file layout's keys (None: a folder of files, read by the layout's own handle).
    file_keys: TorchFileKeys | None = None
    # The optimizer's parameter groups the producer builds, tried first when the optimizer is
    # rebuilt: "trainer" (Trainer's decay/no-decay names) or "nanogpt" (dim >= 2 / dim < 2).
    parameter_groups: str = "trainer"


class CheckpointReader(Protocol):
    """One checkpoint layout. `can_open` looks at names and first bytes only."""

    name: str

    @property
    def replay_facts(self) -> ReplayFacts | None:
        """What a replay must know of the producer; None: this layout is not replayed."""
        ...

    def can_open(self, path: Path) -> bool:
        """`path` is a directory (HF checkpoint-N/, DCP, DeepSpeed global_stepN/) or a file."""
        ...

    def open(self, path: Path, display_path: str, options: LoadOptions) -> CheckpointHandle: ...

    def describe(self, path: Path, display_path: str) -> CheckpointInfo:
        """Step, format and whether optimizer and RNG state are present, from names and the
        pickle's keys only (`--no-weights`: no tensor and no large file is read)."""
        ...


@runtime_checkable
class ConfinableReader(Protocol):
    """A reader that looks beside the path it opens (a sibling checkpoint, DeepSpeed's `latest`,
    accelerate's optimizer folder) and so must be told the input root it may not step above."""

    def confined_to(self, root: Path) -> CheckpointReader: ...


class ConfinesToInput:
    """The `confined_to` of a ConfinableReader whose constructor takes only the input root."""

    def __init__(self, input_root: Path | None = None) -> None:
        self._input_root = input_root

    def confined_to(self, root: Path) -> Self:
        """This reader for checkpoints found under `root` (registry.find_checkpoints)."""
        return type(self)(root)


def parent_inside(input_root: Path | None, path: Path) -> Path | None:
    """`path`'s folder when it lies inside the input, else None (it must be neither read nor
    listed). `input_root` None: `path` itself is the input, so its folder never is."""
    parent = path.parent
    root = path if input_root is None else input_root
    return parent if is_inside(root, parent) else None


def parent_place(path: Path) -> str:
    """How a partial entry names the folder above the input: `run/`, from the text of the path
    the user gave (nothing there is opened)."""
    name = Path(os.path.abspath(path)).parent.name
    return f"{name}/" if name else "the parent folder"
