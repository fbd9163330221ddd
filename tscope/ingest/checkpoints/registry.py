"""The explicit list of checkpoint readers, and the walk that finds every checkpoint in a run.

Readers are asked in this order; the first whose `can_open` says yes claims the path. Folder
layouts come first (a folder claimed by a reader is one checkpoint: nothing inside it is offered
to other readers), then single files, and the catch-all plain state-dict reader last.
"""

from __future__ import annotations

from pathlib import Path

from tscope.ingest.checkpoints.accelerate import AccelerateReader
from tscope.ingest.checkpoints.base import CheckpointReader, ConfinableReader
from tscope.ingest.checkpoints.dcp import DcpReader
from tscope.ingest.checkpoints.deepspeed import DeepSpeedReader
from tscope.ingest.checkpoints.hf_trainer import HfTrainerReader
from tscope.ingest.checkpoints.lightning import LightningReader
from tscope.ingest.checkpoints.nanogpt import NanoGptReader
from tscope.ingest.checkpoints.state_dict_files import StateDictFileReader, step_from_name
from tscope.ingest.checkpoints.step_folder import StepFolderReader
from tscope.ingest.discover import display_path, iter_files

CHECKPOINT_READERS: tuple[CheckpointReader, ...] = (
    # Folders. HF first: a Trainer checkpoint-N/ that holds a DeepSpeed global_stepN/ or an
    # FSDP DCP folder next to its weights is read as one HF checkpoint.
    HfTrainerReader(),
    DeepSpeedReader(),
    DcpReader(),
    AccelerateReader(),  # after DCP: FSDP's sharded save_state folders are DCP's
    StepFolderReader(),  # a loop's own step-N/ folder of weights and optimizer.pt
    # Files.
    LightningReader(),
    NanoGptReader(),
    # Last: any .pt/.bin/.safetensors file with a step in its name.
    StateDictFileReader(),
)


def find_checkpoints(
    root: Path, readers: tuple[CheckpointReader, ...] = CHECKPOINT_READERS
) -> list[tuple[CheckpointReader, Path, str]]:
    """Every checkpoint under root as (reader, path, display path), in step order.

    Steps come from names here (nothing is opened); checkpoints without one sort last. The
    display path is relative to root; root itself is shown by its own name.
    """
    root = Path(root)
    # Bound to root before any can_open: a reader that looks beside a path (Lightning's sibling
    # .ckpt files, DeepSpeed's original of a universal folder) must not look above the input.
    readers = tuple(_confined(reader, root) for reader in readers)
    claimed: dict[Path, CheckpointReader | None] = {}
    found: dict[Path, tuple[CheckpointReader, str]] = {}
    for file in iter_files(root):
        owner = _claiming_folder(file, root, readers, claimed)
        if owner is not None:
            folder, folder_reader = owner
            found.setdefault(folder, (folder_reader, _shown(folder, root)))
            continue
        reader = next((r for r in readers if r.can_open(file)), None)
        if reader is not None:
            found[file] = (reader, _shown(file, root))
    ordered = sorted(found.items(), key=lambda item: _order_key(item[0], item[1][1]))
    return [(reader, path, shown) for path, (reader, shown) in ordered]


def _confined(reader: CheckpointReader, root: Path) -> CheckpointReader:
    """The reader told the input root, where it may read beside the path it opens (a DCP
    folder's accelerate siblings, a Trainer checkpoint's sibling checkpoints, DeepSpeed's
    `latest`, Lightning's sibling .ckpt files): it reads there only inside root, never above."""
    return reader.confined_to(root) if isinstance(reader, ConfinableReader) else reader


def _claiming_folder(
    file: Path,
    root: Path,
    readers: tuple[CheckpointReader, ...],
    claimed: dict[Path, CheckpointReader | None],
) -> tuple[Path, CheckpointReader] | None:
    """The outermost folder from root down to the file's parent that a reader claims.

    Each folder is asked once (`claimed`); the chain from root down is built from the file's
    path relative to root, one step per level: testing each parent against root's `parents`
    cost depth² per file (a crafted chain 400 folders deep: 99 s, red team session 28)."""
    if root.is_file():
        return None
    folder = root
    chain = [root]
    for part in file.parent.relative_to(root).parts:
        folder = folder / part
        chain.append(folder)
    for folder in chain:  # top-down: the outermost claim wins
        if folder not in claimed:
            claimed[folder] = next((r for r in readers if r.can_open(folder)), None)
        reader = claimed[folder]
        if reader is not None:
            return folder, reader
    return None


def _shown(path: Path, root: Path) -> str:
    if path == root:
        return root.resolve().name or root.as_posix()
    return display_path(path, root)


def _order_key(path: Path, shown: str) -> tuple[bool, int, str]:
    step = step_from_name(path.name)
    return (step is None, step if step is not None else 0, shown)
