"""Settings a run left next to its checkpoints: the model's config.json and training_args.bin.

Logs carry most of a run's config (TensorBoard `args`, W&B config.yaml, printed flags); a Trainer
output directory also holds `config.json` (model shape) and `training_args.bin` (every training
argument, a pickle: decoded here from its opcodes, never unpickled). The newest Hugging Face
checkpoint (or the output directory itself, after the final save) is the source.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.pickle_literals import torch_file_literals
from tscope.ingest.safe_fs import is_regular_file, read_bytes_bounded
from tscope.model import CheckpointInfo

MODEL_CONFIG_PREFIX = "model_config."  # the same prefix the TensorBoard reader gives model_config
MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_CONFIG_DEPTH = 16


def checkpoint_config(root: Path, checkpoints: list[CheckpointInfo]) -> dict[str, Any]:
    """Flat `field: value` settings from the newest HF checkpoint (or the run root)."""
    folders = [root] if root.is_dir() else []
    hf = [c for c in checkpoints if c.format == "hf_trainer" and c.step is not None]
    if hf:
        newest = max(hf, key=lambda c: c.step or 0)
        folders.insert(0, root / newest.path if newest.path != "." else root)
    config: dict[str, Any] = {}
    for folder in folders:
        model = _json(folder / "config.json")
        if model:
            for key, value in _flat(model).items():
                config.setdefault(MODEL_CONFIG_PREFIX + key, value)
        arguments = _training_args(folder / "training_args.bin")
        for key, value in _flat(arguments).items():
            config.setdefault(key, value)
    return config


def _json(path: Path) -> dict[str, Any]:
    try:
        if not is_regular_file(path) or path.stat().st_size > MAX_CONFIG_BYTES:
            return {}  # a link or a FIFO is not read (docs/security.md)
        loaded = json.loads(read_bytes_bounded(path, path.name, MAX_CONFIG_BYTES).decode("utf-8"))
    # A broken side file costs only its settings; the checkpoint reader reports it. json recurses
    # once per nesting level, so a deeply nested file is a RecursionError, not a ValueError.
    except (OSError, UnicodeDecodeError, ValueError, RecursionError, UnreadableInput):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def _training_args(path: Path) -> dict[str, Any]:
    if not is_regular_file(path):
        return {}
    recovered = torch_file_literals(path)
    return recovered if isinstance(recovered, dict) else {}


def _flat(values: dict[str, Any], prefix: str = "", depth: int = 0) -> dict[str, Any]:
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            if depth < MAX_CONFIG_DEPTH:  # real configs nest 2-3 levels
                flat.update(_flat(value, f"{name}.", depth + 1))
        elif isinstance(value, (str, int, float, bool)) or value is None:
            flat[name] = value
        elif isinstance(value, (list, tuple)) and all(
            isinstance(item, (str, int, float, bool)) for item in value
        ):
            flat[name] = str(list(value))
    return flat
