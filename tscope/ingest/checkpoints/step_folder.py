"""A checkpoint folder a training loop of its own writes: transformers-style weights
(`model.safetensors`, `pytorch_model.bin`, or their index; `save_pretrained` or safetensors'
`save_file`) beside a torch-saved optimizer (`optimizer.pt`), in a flat folder whose name is the
step (`step-00600`, `step_600`, `iter_600`, `ckpt-600`).

The step is the folder's name, never the optimizer's counter: the counter is what the reset rule
compares with the step (a blind set's plain loop, session 27, saved `checkpoints/step-00600/`
and resumed at 600 with a fresh AdamW; no reader claimed the folders, so the reset went unseen).
Only a flat folder is claimed: a run's root named like a step holds folders of its own (logs,
checkpoints), and claiming it would hide the checkpoints inside it.
"""

from __future__ import annotations

import os
import re
from itertools import islice
from pathlib import Path

from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.optimizer_mapping import ANY_PRODUCER_RULES
from tscope.ingest.checkpoints.step_numbers import step_value
from tscope.ingest.checkpoints.weights_folder import WEIGHT_FILES, WeightsFolderCheckpoint
from tscope.ingest.safe_fs import is_real_folder, is_regular_file
from tscope.model import CheckpointInfo
from tscope.model.checkpoint import ResumeAudit

# The folder's whole name is a step word and the step.
FOLDER_STEP = re.compile(r"^(?:global_)?(?:step|iter|iteration|ckpt|checkpoint)[=_-]?(\d+)$")
OPTIMIZER_FILES = ("optimizer.pt", "optimizer.bin", "optim.pt", "optimizer_state.pt")
SCHEDULER_FILES = ("scheduler.pt", "scheduler.bin", "lr_scheduler.pt")
RNG_FILES = ("rng_state.pth", "rng_state.pt", "rng.pt")
# A folder with more entries than this is no checkpoint a loop wrote: not claimed.
MAX_ENTRIES = 64


def folder_step(folder: Path) -> int | None:
    match = FOLDER_STEP.match(folder.name.lower())
    return step_value(match.group(1)) if match else None


class StepFolderReader:
    name = "step_folder"
    replay_facts = None  # the training loop is the user's own: nothing to rebuild it from

    def can_open(self, path: Path) -> bool:
        """A flat folder named for its step, holding transformers-style weights, and no
        Trainer state (a Trainer's checkpoint-N is hf_trainer.py's)."""
        if not is_real_folder(path) or folder_step(path) is None:
            return False
        if (path / "trainer_state.json").exists():
            return False
        try:
            with os.scandir(path) as listing:
                entries = list(islice(listing, MAX_ENTRIES + 1))  # never all of a huge folder
            has_folders = any(entry.is_dir(follow_symlinks=False) for entry in entries)
        except OSError:
            return False
        if len(entries) > MAX_ENTRIES or has_folders:
            return False
        return any(is_regular_file(path / name) for name in WEIGHT_FILES)

    def open(self, path: Path, display_path: str, options: LoadOptions) -> StepFolderCheckpoint:
        return StepFolderCheckpoint(path, display_path, options)

    def describe(self, path: Path, display_path: str) -> CheckpointInfo:
        checkpoint = StepFolderCheckpoint(path, display_path, LoadOptions())
        checkpoint.close()
        return checkpoint.info


class StepFolderCheckpoint(WeightsFolderCheckpoint):
    optimizer_files = OPTIMIZER_FILES
    grouping_rules = ANY_PRODUCER_RULES

    def __init__(self, path: Path, display_path: str, options: LoadOptions) -> None:
        super().__init__(path, display_path, options)
        self._has_scheduler = any(is_regular_file(path / name) for name in SCHEDULER_FILES)
        self._has_rng = any(is_regular_file(path / name) for name in RNG_FILES)
        self.info = CheckpointInfo(
            step=folder_step(path),
            path=display_path,
            format=StepFolderReader.name,
            has_optimizer=self._optimizer_file() is not None,
            has_rng=self._has_rng,
        )
        self._audit: ResumeAudit | None = None

    def audit(self) -> ResumeAudit:
        if self._audit is None:
            found = self._optimizer_audit(
                "no optimizer file: a resume from it restarts the optimizer"
            )
            self._audit = ResumeAudit(
                has_weights=found.has_weights,
                has_optimizer_moments=found.has_moments,
                has_step_counters=found.has_step_counters,
                has_scheduler=self._has_scheduler,
                has_scaler=None,
                rng_ranks=(0,) if self._has_rng else (),
                expected_ranks=None,
                has_sampler_state=None,
                notes=found.notes,
            )
        return self._audit
