"""torch distributed checkpoints (DCP): a folder of `.metadata` + `__{rank}_{i}.distcp` shards.

Layouts read (keys are DCP's flattened names, torch distributed/checkpoint/state_dict.py):
- `{"model": ..., "optim" | "optimizer": get_optimizer_state_dict(...)}` -> `model.<fqn>`,
  `optim.state.<fqn>.exp_avg`, `optim.param_groups.<i>.lr` (and `.params`: the group's FQNs);
- torchtitan's: model keys at the top level, `optimizer.state.<fqn>.*` and, with
  `flatten_optimizer_state_dict`, `optimizer.param_groups.<fqn>.lr`; `lr_scheduler.*`,
  `dataloader.*`, `train_state.step`;
- accelerate's FSDP SHARDED_STATE_DICT inside a Trainer `checkpoint-N/`: `pytorch_model_fsdp_0/`
  (`{"model": sd}`) and `optimizer_0/` (`{"optimizer": osd}`), next to `scheduler.pt`,
  `rng_state_{rank}.pth`, `trainer_state.json`;
- a bare `get_model_state_dict` (top-level FQNs only).
Every tensor is read alone, in this process, without a process group (dcp_storage); the
optimizer's moments and param groups are mapped to parameter names in dcp_optimizer.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints import dcp_storage
from tscope.ingest.checkpoints.base import (
    ConfinesToInput,
    LoadOptions,
    OptimizerState,
    ReplayFacts,
)
from tscope.ingest.checkpoints.dcp_layout import (
    SAMPLER_ROOTS,
    SCHEDULER_ROOTS,
    STEP_KEYS,
    DcpFolder,
    KeyLayout,
    classify,
    load_folder,
)
from tscope.ingest.checkpoints.dcp_optimizer import read_optimizer_state
from tscope.ingest.checkpoints.state_dict_files import read_json, step_from_name
from tscope.ingest.checkpoints.step_numbers import step_value
from tscope.ingest.safe_fs import is_inside
from tscope.model import CheckpointInfo, PartialInput
from tscope.model.checkpoint import ResumeAudit

if TYPE_CHECKING:
    import torch

ACCELERATE_MODEL_DIR = re.compile(r"^pytorch_model_fsdp_(\d+)$")
ACCELERATE_OPTIMIZER_DIR = "optimizer_{index}"
ACCELERATE_OPTIMIZER_ONLY = re.compile(r"^optimizer_\d+$")


class DcpReader(ConfinesToInput):
    name = "torch_dcp"
    replay_facts = ReplayFacts(next_update_offset=1, sharded=True)  # step N: N updates done

    def __init__(self, input_root: Path | None = None) -> None:
        # The input the user named. accelerate keeps a DCP folder's optimizer, step and RNG files
        # beside it, in the Trainer's checkpoint-N/; they are read only when that folder lies
        # inside this root. None: the opened folder is the root (nothing above it is read).
        self._input_root = input_root

    def can_open(self, path: Path) -> bool:
        """A folder holding `.metadata`, or a Trainer folder holding accelerate's
        `pytorch_model_fsdp_0/` DCP folder and no consolidated weights."""
        if not path.is_dir():
            return False
        if (path / dcp_storage.METADATA_FILE).is_file():
            return True
        holds_weights = any(
            (path / f).exists()
            for f in ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")
        )
        return not holds_weights and (path / "pytorch_model_fsdp_0" / ".metadata").is_file()

    def open(self, path: Path, display_path: str, options: LoadOptions) -> DcpCheckpoint:
        return DcpCheckpoint(path, display_path, options, self._input_root)

    def describe(self, path: Path, display_path: str) -> CheckpointInfo:
        # Opening reads only `.metadata` (no tensor): which keys are model and which moments
        # is the description.
        checkpoint = DcpCheckpoint(path, display_path, LoadOptions(), self._input_root)
        checkpoint.close()
        return checkpoint.info


class DcpCheckpoint:
    def __init__(
        self,
        path: Path,
        display_path: str,
        options: LoadOptions,
        input_root: Path | None = None,
    ) -> None:
        self.partial: list[PartialInput] = []
        self._options = options
        self._input_root = path if input_root is None else input_root
        self._trainer_dir: Path | None = None  # the accelerate/Trainer checkpoint-N/, if any
        self._unread_siblings = False  # that folder lies outside the input: never looked at
        self._folders = self._open_folders(path, display_path, options)
        layout = KeyLayout()
        for folder in self._folders:
            classify(folder, layout)
        self._model, self._moments = layout.model, layout.moments
        self._groups, self._loop_roots = layout.groups, layout.loop_roots
        self._parameters: set[str] | None = None
        self._optimizer: OptimizerState | None = None
        self._step_source = ""
        step = self._step(path)
        self.info = CheckpointInfo(
            step=step,
            path=display_path,
            format="torch_dcp",
            has_optimizer=bool(self._moments),
            has_rng=bool(self._rng_ranks()),
        )

    # --- opening ---------------------------------------------------------------------------

    def _open_folders(self, path: Path, shown: str, options: LoadOptions) -> list[DcpFolder]:
        model_dir, model_shown = path, shown
        if not (path / dcp_storage.METADATA_FILE).is_file():  # a Trainer checkpoint-N/
            model_dir, model_shown = path / "pytorch_model_fsdp_0", f"{shown}/pytorch_model_fsdp_0"
        folders = [load_folder(model_dir, model_shown, options, self.partial)]
        if ACCELERATE_OPTIMIZER_ONLY.match(path.name):  # optimizer_0/ opened alone
            self._trainer_dir = self._beside(
                path, shown, "the model (pytorch_model_fsdp_0/), trainer_state.json (the step)"
            )
        match = ACCELERATE_MODEL_DIR.match(model_dir.name)
        if match:  # accelerate writes the optimizer into a sibling DCP folder
            name = ACCELERATE_OPTIMIZER_DIR.format(index=match.group(1))
            self._trainer_dir = self._beside(
                model_dir, model_shown, f"the optimizer ({name}/), trainer_state.json (the step)"
            )
            if self._trainer_dir is None:
                return folders
            parent_shown = model_shown.rpartition("/")[0]
            optimizer_shown = f"{parent_shown}/{name}" if parent_shown else name
            if (model_dir.parent / name / dcp_storage.METADATA_FILE).is_file():
                try:
                    folders.append(
                        load_folder(model_dir.parent / name, optimizer_shown, options, self.partial)
                    )
                except UnreadableInput as error:  # the weights still count without it
                    self.partial.append(PartialInput(error.path, error.problem_text))
        return folders

    def _beside(self, folder: Path, shown: str, siblings: str) -> Path | None:
        """The Trainer's checkpoint-N/ holding accelerate's DCP `folder`, or None when it lies
        outside the input: given `checkpoint-5/pytorch_model_fsdp_0` alone, its parent's
        trainer_state.json and optimizer_0/ were read (a step and an Adam counter from files the
        user never named). The siblings are only named here, never looked at."""
        parent = folder.parent
        if is_inside(self._input_root, parent):
            return parent
        self._unread_siblings = True
        where = Path(os.path.abspath(folder)).parent.name
        place = f"{where}/" if where else "the parent folder"
        self.partial.append(
            PartialInput(
                shown,
                f"{siblings} and the RNG files that accelerate keeps beside this folder in "
                f"{place} are not read: they lie outside the input. Point tscope at {place} "
                "to read them",
            )
        )
        return None

    def _step(self, path: Path) -> int | None:
        for folder in self._folders:
            for key in STEP_KEYS:
                if key in folder.tensor_keys or key in folder.bytes_keys:
                    value = self._value(folder, key)
                    if value is not None:
                        self._step_source = f"entry `{key}`"
                        return value
        if self._trainer_dir is not None:
            state_file = self._trainer_dir / "trainer_state.json"
            state = (
                read_json(state_file, "trainer_state.json", []) if state_file.is_file() else None
            )
            step = step_value(state.get("global_step")) if state else None
            if step is not None:
                self._step_source = "trainer_state.json"
                return step
        # pytorch_model_fsdp_0's or optimizer_0's number is not a step: the Trainer folder's
        # name is, and outside the input it is still known from the path the user gave (its
        # text only: nothing there is opened).
        name = self._trainer_dir.name if self._trainer_dir else path.name
        if self._unread_siblings:
            name = Path(os.path.abspath(path)).parent.name
        step = step_from_name(name)
        if step is not None:
            self._step_source = "folder name"
        return step

    def _value(self, folder: DcpFolder, key: str) -> int | None:
        try:
            if key in folder.tensor_keys:
                raw: Any = dcp_storage.load_tensor(folder.path, folder.metadata, key, folder.shown)
            else:
                raw = dcp_storage.load_bytes_item(
                    folder.path, folder.metadata, key, folder.shown, self._options
                )
        except UnreadableInput as error:
            self.partial.append(PartialInput(error.path, error.problem_text))
            return None
        return step_value(raw)  # None when not a plausible number: look elsewhere for the step

    # --- the handle ----------------------------------------------------------------------

    def tensor_names(self) -> list[str]:
        """Parameters: with optimizer state, model entries the optimizer holds (its groups list
        them, with or without moments); the rest are buffers. Without it, every model entry."""
        if self._parameters is None:
            state = self.optimizer_state()
            owned = set(state.group_of) | set(state.per_param) if state is not None else set()
            self._parameters = owned & set(self._model) or set(self._model)
        return sorted(self._parameters)

    def load_tensor(self, name: str) -> torch.Tensor:
        where = self._model.get(name)
        if where is None:
            raise UnreadableInput(self.info.path, f"holds no tensor named {name}")
        folder, key = where
        return dcp_storage.load_tensor(folder.path, folder.metadata, key, folder.shown)

    def optimizer_state(self) -> OptimizerState | None:
        if not self._moments:
            return None
        if self._optimizer is None:  # group hyper-parameters are read once
            self._optimizer = read_optimizer_state(
                self._model, self._moments, self._groups, self._options, self.partial
            )
        return self._optimizer

    def _rng_ranks(self) -> tuple[int, ...]:
        """Ranks whose RNG state sits next to the DCP folders (HF Trainer / accelerate files)."""
        if self._trainer_dir is None:
            return ()
        ranks = set()
        for file in self._trainer_dir.iterdir():
            match = re.match(r"^(?:rng_state|random_states)(?:_(\d+))?\.(?:pth|pkl)$", file.name)
            if match:
                ranks.add(int(match.group(1) or 0))
        return tuple(sorted(ranks))

    def audit(self) -> ResumeAudit:
        sibling = {f.name for f in self._trainer_dir.iterdir()} if self._trainer_dir else set()
        notes = [f"saved by {max(len(f.ranks), 1)} rank(s): {f.shown}" for f in self._folders]
        if self._step_source:
            notes.append(f"step from the {self._step_source}")
        rng = self._rng_ranks()
        if self._unread_siblings:
            notes.append(
                "the Trainer folder around this DCP folder lies outside the input: its "
                "RNG, scheduler and step files were not read"
            )
        elif not rng:
            notes.append("no RNG state is saved with this DCP checkpoint")
        has_scaler = (
            True if "scaler.pt" in sibling or self._loop_roots & {"scaler", "grad_scaler"} else None
        )
        return ResumeAudit(
            has_weights=bool(self._model),
            has_optimizer_moments=bool(self._moments)
            and all("exp_avg" in s and "exp_avg_sq" in s for s in self._moments.values()),
            has_step_counters=bool(self._moments)
            and all("step" in s for s in self._moments.values()),
            has_scheduler=bool(self._loop_roots & set(SCHEDULER_ROOTS))
            or "scheduler.pt" in sibling,
            has_scaler=has_scaler,
            rng_ranks=rng,
            expected_ranks=max((len(f.ranks) for f in self._folders), default=0) or None,
            has_sampler_state=True
            if self._loop_roots & set(SAMPLER_ROOTS) or "sampler.bin" in sibling
            else None,
            notes=tuple(notes),
        )

    def close(self) -> None:
        self._folders = []
        self._model = {}
        self._moments = {}
