"""An inventory of the checkpoints in a run directory without loading a tensor (`--no-weights`).

The same walk and readers as the statistics (`registry.find_checkpoints`); each reader's
`describe` tells the step, the layout and whether optimizer and RNG state are present from names
and pickle keys only. Reading what the checkpoints hold is the readers' `open`.
"""

from __future__ import annotations

from pathlib import Path

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.registry import find_checkpoints
from tscope.model import CheckpointInfo


def checkpoint_inventory(root: Path) -> list[CheckpointInfo]:
    described: list[CheckpointInfo] = []
    for reader, path, shown in find_checkpoints(root):
        try:
            described.append(reader.describe(path, shown))
        except UnreadableInput:
            continue  # reported with its reason when the checkpoints are read
    return sorted(described, key=lambda c: (c.step is None, c.step or 0, c.path))
