"""An inventory of the checkpoints in a run directory, from names alone (no tensor is loaded).

Reading what checkpoints hold is the checkpoint readers' job; the inventory only tells the report
which checkpoints exist, at which step, and whether they carry optimizer and RNG state.
"""

from __future__ import annotations

import pickletools
import re
import zipfile
from pathlib import Path

from tscope.ingest.discover import display_path, iter_files
from tscope.model import CheckpointInfo

_HF_DIR = re.compile(r"^checkpoint-(\d+)$")
_STEP_IN_NAME = re.compile(r"(?:step|iter|ckpt|checkpoint)[=_-]?(\d+)", re.IGNORECASE)
_WEIGHT_FILES = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin")


def checkpoint_inventory(root: Path) -> list[CheckpointInfo]:
    found: dict[str, CheckpointInfo] = {}
    for file in iter_files(root):
        parent = file.parent
        match = _HF_DIR.match(parent.name)
        if match and file.name in _WEIGHT_FILES:
            shown = display_path(parent, root) if parent != root else "."
            found[shown] = CheckpointInfo(
                step=int(match.group(1)),
                path=shown,
                format="hf_trainer",
                has_optimizer=(parent / "optimizer.pt").exists()
                or (parent / "optimizer.bin").exists(),
                has_rng=any(parent.glob("rng_state*.pth")),
            )
        elif (
            file.suffix in (".pt", ".ckpt")
            and not match
            and file.name not in ("optimizer.pt", "scheduler.pt", "scaler.pt", "training_args.bin")
        ):
            keys = pickle_strings(file)
            if keys is None:
                continue
            step_match = _STEP_IN_NAME.search(file.stem)
            shown = display_path(file, root)
            found[shown] = CheckpointInfo(
                step=int(step_match.group(1)) if step_match else None,
                path=shown,
                format=torch_file_producer(keys),
                has_optimizer=bool(keys & {"optimizer", "optimizer_states"}),
                has_rng=bool(keys & {"rng_state", "rng_states", "cpu_rng_state"}),
            )
    return sorted(found.values(), key=lambda c: (c.step is None, c.step or 0, c.path))


def torch_file_producer(keys: set[str]) -> str:
    """The producer a torch file's top-level keys name: "lightning" (its version key), "nanogpt"
    (iter_num and model_args), else "torch_file". The restart point depends on it: their step N
    is the state before the update logged as step N (analyzers/summary.py)."""
    if "pytorch-lightning_version" in keys and "state_dict" in keys:
        return "lightning"
    if {"iter_num", "model_args"} <= keys:
        return "nanogpt"
    return "torch_file"


# The pickle inside a torch zip file holds the dict keys as string opcodes; scanning the opcodes
# (never executing them) tells which top-level parts a checkpoint has without loading a tensor.
_MAX_PICKLE_BYTES = 64 * 1024 * 1024


def pickle_strings(file: Path) -> set[str] | None:
    """String constants in a torch file's data.pkl, or None if it is not a torch zip file."""
    try:
        with zipfile.ZipFile(file) as archive:
            names = [n for n in archive.namelist() if n.endswith("data.pkl")]
            if not names or archive.getinfo(names[0]).file_size > _MAX_PICKLE_BYTES:
                return None
            payload = archive.read(names[0])
        return {arg for _, arg, _ in pickletools.genops(payload) if isinstance(arg, str)}
    except Exception:  # a stranger's malformed file: any parse failure means "not inspectable"
        return None
