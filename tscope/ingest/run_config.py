"""Settings a run left next to its checkpoints: the model's config.json and training_args.bin.

Logs carry most of a run's config (TensorBoard `args`, W&B config.yaml, printed flags); a Trainer
output directory also holds `config.json` (model shape) and `training_args.bin` (every training
argument, a pickle: decoded here from its opcodes, never unpickled). The newest Hugging Face
checkpoint (or the output directory itself, after the final save) is the source.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tscope.errors import UnreadableInput
from tscope.ingest import safe_json
from tscope.ingest.checkpoints.pickle_literals import torch_file_literals
from tscope.ingest.checkpoints.registry import CHECKPOINT_READERS
from tscope.ingest.safe_fs import is_regular_file
from tscope.model import CheckpointInfo
from tscope.model.visible_text import cut_text

MODEL_CONFIG_PREFIX = "model_config."  # the same prefix the TensorBoard reader gives model_config
MAX_CONFIG_BYTES = 4 * 1024 * 1024
MAX_CONFIG_DEPTH = 16
# The layouts whose checkpoint folder holds the producer's config.json and training_args.bin
# (their readers' ReplayFacts.folder_with_side_files: the Trainer's checkpoint-N/).
_SIDE_FILE_FORMATS = frozenset(
    reader.name
    for reader in CHECKPOINT_READERS
    if reader.replay_facts is not None and reader.replay_facts.folder_with_side_files
)


def checkpoint_config(root: Path, checkpoints: list[CheckpointInfo]) -> dict[str, Any]:
    """Flat `field: value` settings from the newest checkpoint folder with side files (a Trainer
    checkpoint-N/), or the run root."""
    folders = [root] if root.is_dir() else []
    with_side_files = [
        c for c in checkpoints if c.format in _SIDE_FILE_FORMATS and c.step is not None
    ]
    if with_side_files:
        newest = max(with_side_files, key=lambda c: c.step or 0)
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
    if not is_regular_file(path):
        return {}  # a link or a FIFO is not read (docs/security.md)
    try:
        # Bounded in size and nesting (a 100,000-deep config.json once ended in a traceback).
        loaded = safe_json.load_file(path, path.name, MAX_CONFIG_BYTES)
    except UnreadableInput:
        return {}  # a broken side file costs only its settings; the checkpoint reader reports it
    return loaded if isinstance(loaded, dict) else {}


def _training_args(path: Path) -> dict[str, Any]:
    if not is_regular_file(path):
        return {}
    recovered = torch_file_literals(path)
    return recovered if isinstance(recovered, dict) else {}


# A text value (a string, or a list of literals written as text) keeps at most this many
# characters, and one side file's settings at most MAX_CONFIG_BYTES of text in all: a 200 KB
# training_args.bin listing one memoized 100 kB string 20,000 times became a 2 GB value and a
# MemoryError (red team, session 29). Real settings are names, paths and short lists.
MAX_VALUE_CHARS = 10_000


def _flat(
    values: dict[str, Any], prefix: str = "", depth: int = 0, budget: list[int] | None = None
) -> dict[str, Any]:
    left = budget if budget is not None else [MAX_CONFIG_BYTES]  # shared by the recursion
    flat: dict[str, Any] = {}
    for key, value in values.items():
        name = f"{prefix}{key}"
        if isinstance(value, dict):
            if depth < MAX_CONFIG_DEPTH:  # real configs nest 2-3 levels
                flat.update(_flat(value, f"{name}.", depth + 1, left))
            continue
        if isinstance(value, str):
            value = _shortened(value)
        elif isinstance(value, (list, tuple)) and all(
            isinstance(item, (str, int, float, bool)) for item in value
        ):
            value = _list_text(value)
        elif not (isinstance(value, (int, float, bool)) or value is None):
            continue
        cost = len(name) + (len(value) if isinstance(value, str) else 8)
        if cost > left[0]:
            continue  # past the side file's budget: the rest of its text is not kept
        left[0] -= cost
        flat[name] = value
    return flat


def _shortened(text: str) -> str:
    return cut_text(text, MAX_VALUE_CHARS)


def _list_text(items: list[Any] | tuple[Any, ...]) -> str:
    """`str(list(items))`, built item by item and cut at MAX_VALUE_CHARS."""
    parts: list[str] = []
    used = 2
    for index, item in enumerate(items):
        part = repr(_shortened(item)) if isinstance(item, str) else repr(item)
        used += len(part) + 2
        if used > MAX_VALUE_CHARS:
            return "[" + "".join(f"{p}, " for p in parts) + f"… ({len(items) - index} more)]"
        parts.append(part)
    return "[" + ", ".join(parts) + "]"
