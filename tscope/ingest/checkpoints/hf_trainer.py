"""Hugging Face Trainer checkpoints: `checkpoint-{global_step}/` folders (DOMAIN.md §A.1).

Weights come from `model.safetensors`, its shards and index, or the legacy `pytorch_model.bin`
(+ index); the optimizer from `optimizer.pt` (`optimizer.bin`); the resume audit from
`scheduler.pt`, `scaler.pt`, `rng_state[_{rank}].pth`, `trainer_state.json` and the plain data
recovered from `training_args.bin` without unpickling it.
"""

from __future__ import annotations

import re
from pathlib import Path, PurePosixPath
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
from tscope.ingest.checkpoints.hf_trainer_resume import TrainerResumeFiles, trainer_resume_audit
from tscope.ingest.checkpoints.optimizer_mapping import TRAINER_RULES, map_optimizer_state
from tscope.ingest.checkpoints.param_order import ParamSpec, architecture_order, inferred_orders
from tscope.ingest.checkpoints.pickle_literals import torch_file_literals
from tscope.ingest.checkpoints.rng_state import read_rng_state
from tscope.ingest.checkpoints.safe_load import safe_torch_load
from tscope.ingest.checkpoints.state_dict_files import (
    TensorSource,
    read_json,
    step_from_name,
    step_value,
)
from tscope.ingest.lfs_pointer import LFS_POINTER_PROBLEM, is_lfs_pointer
from tscope.ingest.safe_fs import OUTSIDE_INPUT, is_inside
from tscope.model import CheckpointInfo, PartialInput
from tscope.model.checkpoint import ResumeAudit

if TYPE_CHECKING:
    import torch

    from tscope.ingest.checkpoints.safetensors_header import HeaderEntry

HF_CHECKPOINT_DIR = re.compile(r"^checkpoint-(\d+)$")
_RNG_FILE = re.compile(r"^rng_state(?:_(\d+))?\.pth$")
_WEIGHT_FILES = (
    "model.safetensors",
    "model.safetensors.index.json",
    "pytorch_model.bin",
    "pytorch_model.bin.index.json",
    "adapter_model.safetensors",  # PEFT: the adapter is what the optimizer trained
)
_OPTIMIZER_FILES = ("optimizer.pt", "optimizer.bin")
# Input embeddings an untied-on-disk `lm_head.weight` reuses when config.tie_word_embeddings.
_EMBEDDING_NAMES = (
    "wte",
    "embed_tokens",
    "word_embeddings",
    "tok_embeddings",
    "embed_in",
    "shared",
)


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
        if not any((path / f).is_file() for f in (*_WEIGHT_FILES, *_OPTIMIZER_FILES)):
            return False
        return not any(HF_CHECKPOINT_DIR.match(p.name) for p in path.iterdir() if p.is_dir())

    def open(self, path: Path, display_path: str, options: LoadOptions) -> CheckpointHandle:
        return HfTrainerCheckpoint(path, display_path, options, self._input_root)

    def describe(self, path: Path, display_path: str) -> CheckpointInfo:
        return CheckpointInfo(
            step=step_from_name(path.name),  # checkpoint-{global_step}
            path=display_path,
            format=self.name,
            has_optimizer=optimizer_file(path) is not None,
            has_rng=bool(rng_files(path)),
        )


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


class HfTrainerCheckpoint:
    def __init__(
        self,
        path: Path,
        display_path: str,
        options: LoadOptions,
        input_root: Path | None = None,
    ) -> None:
        self.partial: list[PartialInput] = []
        self._dir, self._shown, self._options = path, display_path, options
        # The run folder holding the sibling checkpoint-*/ folders; None when it lies outside
        # the input (given `run/checkpoint-5` alone, `run/` is never listed).
        self._run_dir = parent_inside(input_root, path)
        self._source = TensorSource()
        self._notes: list[str] = []
        self.config = self._json("config.json") or {}
        self.trainer_state = self._json("trainer_state.json")
        self.training_args = self._training_args()
        self._read_weights()
        self._aliases = self._tied_aliases()
        step = step_value(self.trainer_state.get("global_step")) if self.trainer_state else None
        self.info = CheckpointInfo(
            step=step if step is not None else step_from_name(path.name),
            path=display_path,
            format="hf_trainer",
            has_optimizer=self._optimizer_file() is not None,
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
        self._optimizer: OptimizerState | None = None
        self._optimizer_raw: Any = None
        self._optimizer_loaded = False
        self._audit: ResumeAudit | None = None

    # --- weights ---------------------------------------------------------------------------

    def _read_weights(self) -> None:
        for index_name, single in (
            ("model.safetensors.index.json", "model.safetensors"),
            ("pytorch_model.bin.index.json", "pytorch_model.bin"),
        ):
            if (self._dir / index_name).is_file():
                self._read_shards(index_name)
                return
            if (self._dir / single).is_file():
                self._read_file(self._dir / single)
                return
        if (self._dir / "adapter_model.safetensors").is_file():
            self._read_file(self._dir / "adapter_model.safetensors")
            self._notes.append("PEFT adapter checkpoint: only the adapter weights are stored")

    def _read_shards(self, index_name: str) -> None:
        index = self._json(index_name) or {}
        weight_map = index.get("weight_map")
        if not isinstance(weight_map, dict):
            self.partial.append(PartialInput(self._file_shown(index_name), "has no weight_map"))
            return
        # Shards are numbered in save order, so for .bin shards their concatenation keeps the
        # state dict's (registration) order.
        for shard in sorted({str(v) for v in weight_map.values()}):
            file = self._dir / shard
            if not _names_a_file_inside(self._dir, shard):
                # An absolute or `../` name would read a file the user never gave tscope.
                self.partial.append(
                    PartialInput(
                        self._file_shown(index_name),
                        f"weight_map names shard {shard!r}, {OUTSIDE_INPUT}; it is not read",
                    )
                )
                continue
            if not file.is_file():
                self.partial.append(
                    PartialInput(self._file_shown(shard), "shard listed in the index is missing")
                )
                continue
            self._read_file(file)

    def _read_file(self, file: Path) -> None:
        shown = self._file_shown(file.name)
        try:
            if file.suffix == ".safetensors":
                self._source.add_safetensors(file, shown)
            else:
                loaded = safe_torch_load(file, shown, self._options)
                if not isinstance(loaded, dict):
                    raise UnreadableInput(shown, "holds no state dict")
                self._source.add_state_dict(loaded)
        except UnreadableInput as error:
            self.partial.append(_partial(error))

    def _tied_aliases(self) -> dict[str, str]:
        """`lm_head.weight` left out of the file because it is the input embedding."""
        names = set(self._source.names())
        if "lm_head.weight" in names or self.config.get("tie_word_embeddings") is False:
            return {}
        for name in sorted(names):
            module = name.removesuffix(".weight").rsplit(".", 1)[-1]
            if name.endswith(".weight") and module in _EMBEDDING_NAMES:
                self._notes.append(f"lm_head.weight is tied to {name} (stored once)")
                return {"lm_head.weight": name}
        return {}

    def tensor_names(self) -> list[str]:
        return self._source.names()

    def load_tensor(self, name: str) -> torch.Tensor:
        return self._source.load(self._aliases.get(name, name), self._shown)

    def raw_location(self, name: str) -> tuple[Path, HeaderEntry] | None:
        """Where a safetensors-stored tensor's bytes are (read without torch by the scan)."""
        return self._source.raw_location(self._aliases.get(name, name))

    # --- optimizer -------------------------------------------------------------------------

    def _optimizer_file(self) -> Path | None:
        return optimizer_file(self._dir)

    def _load_optimizer(self) -> Any:
        if not self._optimizer_loaded:
            self._optimizer_loaded = True
            file = self._optimizer_file()
            if file is not None:
                try:
                    self._optimizer_raw = safe_torch_load(
                        file, self._file_shown(file.name), self._options
                    )
                except UnreadableInput as error:
                    self.partial.append(_partial(error))
        return self._optimizer_raw

    def optimizer_state(self) -> OptimizerState | None:
        raw = self._load_optimizer()
        if raw is None:
            return None
        if self._optimizer is None:
            self._optimizer, note = map_optimizer_state(raw, self._orders(), TRAINER_RULES)
            self._notes.append(f"optimizer ids mapped to names: {note}")
        return self._optimizer

    def _orders(self) -> list[tuple[str, list[ParamSpec]]]:
        params = self._source.order
        orders: list[tuple[str, list[ParamSpec]]] = []
        declared = architecture_order(self.config, params)
        if declared is not None:
            architecture = self.config["architectures"][0]
            orders.append((f"{architecture}'s named_parameters() order", declared))
        if self._source.stored_order_is_registration:
            orders.append(("stored state-dict order", params))
        model_type = self.config.get("model_type")
        return orders + inferred_orders(params, model_type if isinstance(model_type, str) else None)

    # --- resume audit ----------------------------------------------------------------------

    def audit(self) -> ResumeAudit:
        if self._audit is None:
            self._audit = self._make_audit()
        return self._audit

    def _make_audit(self) -> ResumeAudit:
        raw = self._load_optimizer()
        self.optimizer_state()  # maps the optimizer's ids, noted in self._notes
        return trainer_resume_audit(
            TrainerResumeFiles(
                folder=self._dir,
                run_dir=self._run_dir,
                training_args=self.training_args or {},
                optimizer_raw=raw,
                has_optimizer_file=self._optimizer_file() is not None,
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

    def _loads(self, name: str, rng: bool = False) -> bool:
        """The file exists and loads safely; a refused or broken file goes to partial."""
        file = self._dir / name
        if not file.is_file():
            return False
        try:
            if rng:
                read_rng_state(file, self._file_shown(name), self._options)
            else:
                safe_torch_load(file, self._file_shown(name), self._options)
        except UnreadableInput as error:
            self.partial.append(_partial(error))
            return False
        return True

    # --- side files ------------------------------------------------------------------------

    def _json(self, name: str) -> dict[str, Any] | None:
        file = self._dir / name
        return read_json(file, self._file_shown(name), self.partial) if file.is_file() else None

    def _training_args(self) -> dict[str, Any] | None:
        """TrainingArguments as plain data, decoded without unpickling (never runs the file)."""
        file = self._dir / "training_args.bin"
        if not file.is_file():
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

    def _file_shown(self, name: str) -> str:
        return f"{self._shown}/{name}"

    def close(self) -> None:
        self._source.close()
        self._optimizer = None
        self._optimizer_raw = None


def _names_a_file_inside(folder: Path, name: str) -> bool:
    """A relative name without `..` that resolves inside the checkpoint folder."""
    relative = PurePosixPath(name)
    if relative.is_absolute() or ".." in relative.parts or not relative.parts:
        return False
    return is_inside(folder, folder / relative)


def _partial(error: UnreadableInput) -> PartialInput:
    return PartialInput(
        error.path, f"{error.problem}. {error.hint}" if error.hint else error.problem
    )
