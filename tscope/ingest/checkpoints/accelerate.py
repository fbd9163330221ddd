"""accelerate's `Accelerator.save_state(folder)` checkpoints (accelerate/checkpointing.py).

The folder holds the first prepared model's weights as `model.safetensors` (`pytorch_model.bin`
with safe_serialization=False; further models `model_1.safetensors`, …), `optimizer.bin`,
`scheduler.bin`, `sampler.bin` or `dl_state_dict.bin`, `scaler.pt` under fp16, and one
`random_states_{process}.pkl` per process: that file is always written, so it marks the layout.
FSDP's sharded folders (`pytorch_model_fsdp_0/`, `optimizer_0/`) are the DCP reader's.

The step: the folder's name is the user's choice (`step_{N}` in transformers' no_trainer
examples, `checkpoint_{i}` numbering saves under automatic_checkpoint_naming) and the RNG file's
"step" is the accelerator's gradient-accumulation counter, so the step is the optimizer's own
update counter when the folder holds one, else a step in the name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.optimizer_mapping import ACCELERATE_RULES
from tscope.ingest.checkpoints.rng_state import read_accelerate_rng_state
from tscope.ingest.checkpoints.state_dict_files import step_from_name
from tscope.ingest.checkpoints.step_numbers import step_value
from tscope.ingest.checkpoints.weights_folder import (
    WEIGHT_FILES,
    WeightsFolderCheckpoint,
    partial_of,
)
from tscope.ingest.safe_fs import is_regular_file
from tscope.model import CheckpointInfo
from tscope.model.checkpoint import ResumeAudit

RNG_FILE = re.compile(r"^random_states_(\d+)\.pkl$")
OPTIMIZER_FILE = "optimizer.bin"
# automatic_checkpoint_naming's folders count saves, not steps.
_SAVE_NUMBERED = re.compile(r"^checkpoint_\d+$")
_MORE_MODELS = re.compile(r"^(?:model|pytorch_model)_(\d+)\.(?:safetensors|bin)$")
_SAMPLER_FILES = ("sampler.bin", "dl_state_dict.bin")


class AccelerateReader:
    name = "accelerate"
    replay_facts = None  # the training loop is the user's own: nothing to rebuild it from

    def can_open(self, path: Path) -> bool:
        """A folder with a `random_states_N.pkl` beside weights or `optimizer.bin`."""
        if not path.is_dir() or (path / "trainer_state.json").is_file():
            return False
        if not rng_files(path):
            return False
        return any(is_regular_file(path / f) for f in (*WEIGHT_FILES, OPTIMIZER_FILE))

    def open(self, path: Path, display_path: str, options: LoadOptions) -> AccelerateCheckpoint:
        return AccelerateCheckpoint(path, display_path, options)

    def describe(self, path: Path, display_path: str) -> CheckpointInfo:
        # The step is the optimizer's counter: opening maps the optimizer file (its tensors stay
        # on disk) and reads the small side files, no weight.
        checkpoint = AccelerateCheckpoint(path, display_path, LoadOptions())
        checkpoint.close()
        return checkpoint.info


def rng_files(folder: Path) -> dict[int, Path]:
    """`random_states_{process}.pkl` files by process index."""
    files: dict[int, Path] = {}
    for file in sorted(folder.glob("random_states_*.pkl")):
        match = RNG_FILE.match(file.name)
        if match and is_regular_file(file):
            files[int(match.group(1))] = file
    return files


def name_step(folder: Path) -> int | None:
    """The step in the folder's name, None for automatic naming's save counter."""
    return None if _SAVE_NUMBERED.match(folder.name) else step_from_name(folder.name)


class AccelerateCheckpoint(WeightsFolderCheckpoint):
    optimizer_files = (OPTIMIZER_FILE,)
    grouping_rules = ACCELERATE_RULES

    def __init__(self, path: Path, display_path: str, options: LoadOptions) -> None:
        super().__init__(path, display_path, options)
        others = sorted(f.name for f in path.iterdir() if _MORE_MODELS.match(f.name))
        if others:
            self._notes.append(
                f"the weights of the first prepared model are read; {', '.join(others[:3])} "
                "(further models) are not"
            )
        self._rng_ranks = tuple(
            rank for rank, file in rng_files(path).items() if self._loads_rng(file)
        )
        self._has_scheduler = self._loads("scheduler.bin")
        self._has_scaler_file = self._loads("scaler.pt")
        # Present is all the audit needs, and sampler.bin is the pickled sampler object itself
        # (a class a safe load refuses): neither file is opened.
        self._has_sampler = any(is_regular_file(path / name) for name in _SAMPLER_FILES)
        self.info = CheckpointInfo(
            step=self._step(path),
            path=display_path,
            format=AccelerateReader.name,
            has_optimizer=self._optimizer_file() is not None,
            has_rng=bool(self._rng_ranks),
        )
        self._audit: ResumeAudit | None = None

    def _loads_rng(self, file: Path) -> bool:
        try:
            read_accelerate_rng_state(file, self._file_shown(file.name), self._options)
        except UnreadableInput as error:
            self.partial.append(partial_of(error))
            return False
        return True

    def _step(self, path: Path) -> int | None:
        """The optimizer's update counter (the largest of its parameters'), else the name's."""
        counted = _optimizer_step(self._load_optimizer())
        named = name_step(path)
        if counted is None:
            return named
        if named is not None and named != counted:
            self._notes.append(
                f"the folder's name says step {named}, its optimizer has made {counted} "
                f"updates: step {counted} is used"
            )
        return counted

    def audit(self) -> ResumeAudit:
        if self._audit is None:
            found = self._optimizer_audit(
                "no optimizer.bin: a resume with load_state restarts the optimizer "
                "(zero moments, step 0)"
            )
            ranks = rng_files(self._dir)
            self._audit = ResumeAudit(
                has_weights=found.has_weights,
                has_optimizer_moments=found.has_moments,
                has_step_counters=found.has_step_counters,
                has_scheduler=self._has_scheduler,
                has_scaler=True if self._has_scaler_file else None,
                rng_ranks=self._rng_ranks,
                expected_ranks=max(ranks) + 1 if ranks else None,
                # save_state writes the sampler only for a seedable sampler or a stateful
                # DataLoader; a shuffled DataLoader without either resumes at the epoch's start.
                has_sampler_state=True if self._has_sampler else None,
                notes=found.notes,
            )
        return self._audit


def _optimizer_step(raw: Any) -> int | None:
    """The largest per-parameter `step` of an Optimizer.state_dict(), None without one."""
    state = raw.get("state") if isinstance(raw, dict) else None
    if not isinstance(state, dict):
        return None
    steps = [step_value(entry.get("step")) for entry in state.values() if isinstance(entry, dict)]
    known = [step for step in steps if step is not None]
    return max(known) if known else None
