"""Hugging Face Trainer checkpoints: `checkpoint-{global_step}/` folders (DOMAIN.md §A.1).

Weights come from `model.safetensors`, its shards and index, or the legacy `pytorch_model.bin`
(+ index); the optimizer from `optimizer.pt` (`optimizer.bin`); the resume audit from
`scheduler.pt`, `scaler.pt`, `rng_state[_{rank}].pth`, `trainer_state.json` and the plain data
recovered from `training_args.bin` without unpickling it.
"""

from __future__ import annotations

import re
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import (
    CheckpointHandle,
    ConfinesToInput,
    LoadOptions,
    OptimizerState,
    ReplayFacts,
    parent_inside,
    parent_place,
)
from tscope.ingest.checkpoints.deepspeed import DeepSpeedCheckpoint, DeepSpeedReader
from tscope.ingest.checkpoints.deepspeed_optimizer import optim_files
from tscope.ingest.checkpoints.hf_trainer_resume import TrainerResumeFiles, trainer_resume_audit
from tscope.ingest.checkpoints.pickle_literals import torch_file_literals
from tscope.ingest.checkpoints.state_dict_files import step_from_name
from tscope.ingest.checkpoints.step_numbers import step_value
from tscope.ingest.checkpoints.weights_folder import (
    WEIGHT_FILES,
    WeightsFolderCheckpoint,
    partial_of,
)
from tscope.ingest.lfs_pointer import LFS_POINTER_PROBLEM, is_lfs_pointer
from tscope.ingest.safe_fs import is_real_folder, is_regular_file
from tscope.model import CheckpointInfo, PartialInput
from tscope.model.checkpoint import ResumeAudit

if TYPE_CHECKING:
    import torch

    from tscope.ingest.checkpoints.safetensors_header import HeaderEntry

HF_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")
_RNG_FILE = re.compile(r"^rng_state(?:_(\d+))?\.pth$")
_OPTIMIZER_FILES = ("optimizer.pt", "optimizer.bin")


class HfTrainerReader(ConfinesToInput):
    name = "hf_trainer"
    replay_facts = ReplayFacts(
        next_update_offset=1,  # checkpoint-N is saved after update N (global_step)
        folder_with_side_files=True,
        model_from_config_json=True,
        training_arguments=True,
        resumes_optimizer_with_scheduler=True,
        trainer_logging=True,
    )

    def __init__(self, input_root: Path | None = None) -> None:
        # The input the user named. A checkpoint's audit looks at the checkpoint-*/ folders
        # beside it (did an earlier one save scaler.pt?) only when they lie inside this root.
        # None: the opened folder is the input (nothing above it is looked at, and with no
        # input named there is no one to tell; find_checkpoints always names it).
        self._input_root = input_root

    def can_open(self, path: Path) -> bool:
        """A `checkpoint-N/` folder (or one with trainer_state.json) holding weights or optimizer.

        The Trainer's output_dir can itself hold a final model and trainer_state.json next to its
        checkpoint-N/ folders; it is not claimed, so the folders below it are still found.
        """
        if not path.is_dir():
            return False
        named = HF_CHECKPOINT_DIR.match(path.name) is not None
        if not named and not (path / "trainer_state.json").is_file():
            return False
        if not any((path / f).is_file() for f in (*WEIGHT_FILES, *_OPTIMIZER_FILES)) and not (
            deepspeed_tag(path)
        ):
            return False
        return not any(HF_CHECKPOINT_DIR.match(p.name) for p in path.iterdir() if p.is_dir())

    def open(self, path: Path, display_path: str, options: LoadOptions) -> CheckpointHandle:
        return HfTrainerCheckpoint(path, display_path, options, self._input_root)

    def describe(self, path: Path, display_path: str) -> CheckpointInfo:
        return CheckpointInfo(
            step=step_from_name(path.name),  # checkpoint-{global_step}
            path=display_path,
            format=self.name,
            has_optimizer=optimizer_file(path) is not None or _tag_has_optimizer(path),
            has_rng=bool(rng_files(path)),
        )


def deepspeed_tag(folder: Path) -> Path | None:
    """The DeepSpeed tag folder the Trainer saved inside a checkpoint under DeepSpeed
    (`global_step{N}/`, model states and ZeRO optimizer partitions), when there is one."""
    tags = sorted(
        entry
        for entry in folder.iterdir()
        if entry.name.startswith("global_step") and is_real_folder(entry)
    )
    return tags[-1] if len(tags) == 1 else None


def _tag_has_optimizer(folder: Path) -> bool:
    tag = deepspeed_tag(folder)
    return tag is not None and bool(optim_files(tag))


def optimizer_file(folder: Path) -> Path | None:
    return next((folder / f for f in _OPTIMIZER_FILES if (folder / f).is_file()), None)


def rng_files(folder: Path) -> dict[int, Path]:
    """The Trainer's per-rank `rng_state[_{rank}].pth` files by rank."""
    ranks: dict[int, Path] = {}
    for file in sorted(folder.glob("rng_state*.pth")):
        match = _RNG_FILE.match(file.name)
        if match:
            ranks[int(match.group(1) or 0)] = file
    return ranks


class HfTrainerCheckpoint(WeightsFolderCheckpoint):
    optimizer_files = _OPTIMIZER_FILES

    def __init__(
        self,
        path: Path,
        display_path: str,
        options: LoadOptions,
        input_root: Path | None = None,
    ) -> None:
        super().__init__(path, display_path, options)
        # The run folder holding the sibling checkpoint-*/ folders; None when it lies outside
        # the input (given `run/checkpoint-5` alone, `run/` is never listed).
        self._run_dir = parent_inside(input_root, path)
        # Under DeepSpeed the Trainer saves no optimizer.pt: the optimizer (and ZeRO-3's fp32
        # weights) are in the tag folder it saves inside the checkpoint, read by its own reader.
        self._deepspeed_optimizer_unreadable = False
        self._deepspeed = self._open_deepspeed(input_root)
        self.trainer_state = self._json("trainer_state.json")
        self.training_args = self._training_args()
        step = step_value(self.trainer_state.get("global_step")) if self.trainer_state else None
        self.info = CheckpointInfo(
            step=step if step is not None else step_from_name(path.name),
            path=display_path,
            format="hf_trainer",
            has_optimizer=self._optimizer_file() is not None
            or (self._deepspeed is not None and self._deepspeed.info.has_optimizer),
            has_rng=bool(self._rng_files()),
        )
        # The small resume files are checked now, so that `partial` is complete after open
        # (the optimizer, the one large file, adds to it when optimizer_state() first reads it).
        self._has_scheduler = self._loads("scheduler.pt")
        self._has_scaler_file = self._loads("scaler.pt")
        if self._run_dir is None and input_root is not None and not self._has_scaler_file:
            # Only a folder without scaler.pt consults its siblings: say what was not looked at.
            place = parent_place(path)
            self.partial.append(
                PartialInput(
                    display_path,
                    f"the checkpoint-*/ folders beside this one in {place} (whether an earlier "
                    "checkpoint saved scaler.pt, the GradScaler state this one lacks) are not "
                    f"read: they lie outside the input. Point tscope at {place} to read them",
                )
            )
        self._rng_ranks = tuple(
            rank for rank, file in self._rng_files().items() if self._loads(file.name, rng=True)
        )
        self._audit: ResumeAudit | None = None

    # --- DeepSpeed inside the checkpoint ---------------------------------------------------

    def _open_deepspeed(self, input_root: Path | None) -> DeepSpeedCheckpoint | None:
        tag = deepspeed_tag(self._dir)
        if tag is None or self._optimizer_file() is not None:
            return None
        reader = DeepSpeedReader(input_root if input_root is not None else self._dir)
        if not reader.can_open(tag):
            return None
        try:
            handle = reader.open(tag, self._file_shown(tag.name), self._options)
        except UnreadableInput as error:
            self.partial.append(partial_of(error))
            return None
        self.partial.extend(handle.partial)
        return handle

    def _deepspeed_weights(self) -> bool:
        """The weights come from the tag folder: the Trainer saved none beside it (ZeRO-3
        without stage3_gather_16bit_weights_on_model_save)."""
        return self._deepspeed is not None and not self._source.order

    def tensor_names(self) -> list[str]:
        if self._deepspeed is not None and self._deepspeed_weights():
            return self._deepspeed.tensor_names()
        return super().tensor_names()

    def load_tensor(self, name: str) -> torch.Tensor:
        if self._deepspeed is not None and self._deepspeed_weights():
            return self._deepspeed.load_tensor(name)
        return super().load_tensor(name)

    def raw_location(self, name: str) -> tuple[Path, HeaderEntry] | None:
        return None if self._deepspeed_weights() else super().raw_location(name)

    def optimizer_state(self) -> OptimizerState | None:
        if self._deepspeed is None:
            return super().optimizer_state()
        if self._deepspeed_optimizer_unreadable:
            return None
        try:
            return self._deepspeed.optimizer_state()
        except UnreadableInput as error:
            # The tag folder still holds the weights (its model file): only the optimizer is
            # lost. Dropping the whole handle sent every weight to the Trainer's folder, which
            # holds none: one "holds no tensor named …" entry per tensor.
            self.partial.append(partial_of(error))
            self._deepspeed_optimizer_unreadable = True
            return None

    def close(self) -> None:
        if self._deepspeed is not None:
            self._deepspeed.close()
        super().close()

    # --- resume audit ----------------------------------------------------------------------

    def audit(self) -> ResumeAudit:
        if self._audit is None:
            self._audit = self._make_audit()
        return self._audit

    def _make_audit(self) -> ResumeAudit:
        raw = self._load_optimizer()
        state = self.optimizer_state()  # maps the optimizer's ids, noted in self._notes
        audit = self._trainer_audit(raw)
        if self._deepspeed is None:
            return audit
        moments = state.per_param if state is not None else {}
        return replace(
            audit,
            has_weights=audit.has_weights or bool(self._deepspeed.tensor_names()),
            has_optimizer_moments=bool(moments)
            and all("exp_avg" in e and "exp_avg_sq" in e for e in moments.values()),
            has_step_counters=bool(moments)
            and all(e.get("step") is not None for e in moments.values()),
            notes=audit.notes + tuple(state.unmapped if state is not None else ()),
        )

    def _trainer_audit(self, raw: Any) -> ResumeAudit:
        return trainer_resume_audit(
            TrainerResumeFiles(
                folder=self._dir,
                run_dir=self._run_dir,
                training_args=self.training_args or {},
                optimizer_raw=raw,
                has_optimizer_file=self._optimizer_file() is not None
                or self._deepspeed is not None,
                has_weights=bool(self._source.order),
                has_scheduler=self._has_scheduler,
                has_scaler_file=self._has_scaler_file,
                rng_ranks=self._rng_ranks,
                rng_file_names={rank: file.name for rank, file in self._rng_files().items()},
                weight_dtypes=tuple(self._source.dtypes.values()),
                handle_notes=tuple(self._notes),
            )
        )

    def _rng_files(self) -> dict[int, Path]:
        return rng_files(self._dir)

    # --- side files ------------------------------------------------------------------------

    def _training_args(self) -> dict[str, Any] | None:
        """TrainingArguments as plain data, decoded without unpickling (never runs the file)."""
        file = self._dir / "training_args.bin"
        if not is_regular_file(file):  # a link is listed (and not followed) by discovery
            return None
        if is_lfs_pointer(file):
            self.partial.append(
                PartialInput(self._file_shown("training_args.bin"), LFS_POINTER_PROBLEM)
            )
            return None
        recovered = torch_file_literals(file)
        if not isinstance(recovered, dict):
            self.partial.append(
                PartialInput(
                    self._file_shown("training_args.bin"),
                    "skipped: holds no plain TrainingArguments data (it is never unpickled)",
                )
            )
            return None
        return recovered
