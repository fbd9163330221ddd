"""Reading a torch distributed checkpoint folder without running its pickles, in one process.

A DCP folder is `.metadata` (a pickled `Metadata`) plus data files `__{rank}_{i}.distcp`.
torch's own `FileSystemReader.read_metadata` calls plain `pickle.load` on `.metadata` (torch
2.13, distributed/checkpoint/filesystem.py), so a planted `__reduce__` would run on open. We
unpickle it with `MetadataUnpickler`, which resolves only the dataclasses DCP writes into that
file (and torch sizes, dtypes, layouts, paths); any other global is refused before anything is
called. We chose a restricted unpickler over parsing the opcodes ourselves because the metadata is
a nest of dataclasses that torch reconstructs with `__setstate__`: re-implementing that would
drift with torch, while the allow-list fails loudly (and safely) when torch adds a class.

Tensors then load through `dcp.load(..., no_dist=True)` with a reader that hands torch the
already-vetted metadata; torch reads tensor records with `torch.load(weights_only=True)`. Non-tensor
entries ("bytes" items: param-group hyper-parameters, a saved step) are torch.save'd objects that
torch's default load planner would open with `weights_only=False`, so we never let it: they are
read here through `safe_torch_load`.
"""

from __future__ import annotations

import io
import pickle
import sys
import tempfile
import warnings
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.safe_load import TRUST_HINT, safe_torch_load

if TYPE_CHECKING:
    import torch

METADATA_FILE = ".metadata"
# A metadata file lists every chunk of every tensor; 1 GiB would be a model of millions of shards.
MAX_METADATA_BYTES = 1 << 30

_DCP_METADATA_CLASSES = frozenset(
    {
        "Metadata",
        "TensorStorageMetadata",
        "BytesStorageMetadata",
        "ChunkStorageMetadata",
        "TensorProperties",
        "StorageMeta",
        "MetadataIndex",
        "_MEM_FORMAT_ENCODING",
    }
)
_PATH_CLASSES = frozenset({"PosixPath", "WindowsPath", "PurePosixPath", "PureWindowsPath"})


class MetadataUnpickler(pickle.Unpickler):
    """Unpickles DCP `.metadata` and nothing else: every global outside the allow-list is refused.

    What the allowed callables do when the pickle calls them: dataclass constructors and
    `__setstate__` of DCP's own metadata classes, `torch.Size(tuple)`, a `pathlib` path from a
    string, an enum lookup, `torch.serialization._get_layout(name)` (a dict lookup). None of them
    touch files, import modules or evaluate strings.
    """

    def find_class(self, module: str, name: str) -> Any:
        import torch

        if module == "torch.distributed.checkpoint.metadata" and name in _DCP_METADATA_CLASSES:
            return getattr(sys.modules[module], name)
        if module == "torch.distributed.checkpoint.filesystem" and name == "_StorageInfo":
            return getattr(sys.modules[module], name)
        if module == "torch":
            value = getattr(torch, name, None)
            if name == "Size" or isinstance(
                value, torch.dtype | torch.layout | torch.memory_format
            ):
                return value
        if module == "torch.serialization" and name == "_get_layout":
            return torch.serialization._get_layout
        if module == "pathlib" and name in _PATH_CLASSES:
            import pathlib

            return getattr(pathlib, name)
        if module == "collections" and name == "OrderedDict":
            import collections

            return collections.OrderedDict
        raise pickle.UnpicklingError(f"global {module}.{name} is not part of DCP metadata")


def read_metadata(folder: Path, display_path: str, options: LoadOptions) -> Any:
    """The folder's `Metadata`, unpickled without running foreign code (unless trusted)."""
    # Importing these registers the classes the allow-list hands out by module name.
    import torch.distributed.checkpoint.filesystem  # noqa: F401
    import torch.distributed.checkpoint.metadata as dcp_metadata

    shown = f"{display_path}/{METADATA_FILE}"
    path = folder / METADATA_FILE
    try:
        size = path.stat().st_size
        if size > MAX_METADATA_BYTES:
            raise UnreadableInput(shown, f"metadata of {size} bytes is implausibly large")
        payload = path.read_bytes()
    except OSError as error:
        raise UnreadableInput(shown, f"cannot be opened ({error.strerror or error})") from error
    try:
        if options.trust_pickle:
            print(
                f"tscope: warning: unpickling {shown} with --trust-pickle: this runs code from "
                "the file.",
                file=sys.stderr,
            )
            metadata = pickle.loads(payload)
        else:
            metadata = MetadataUnpickler(io.BytesIO(payload)).load()
    except pickle.UnpicklingError as error:
        if "not part of DCP metadata" in str(error):
            raise UnreadableInput(
                shown, f"it holds pickled objects outside the safe set ({error})", TRUST_HINT
            ) from error
        raise UnreadableInput(shown, f"not a readable DCP metadata file ({error})") from error
    except Exception as error:  # truncated or corrupted pickle: any failure is the file's
        problem = str(error).strip().splitlines()[0][:200] if str(error).strip() else ""
        raise UnreadableInput(
            shown, f"not a readable DCP metadata file ({problem or type(error).__name__})"
        ) from error
    if not isinstance(metadata, dcp_metadata.Metadata) or not isinstance(
        getattr(metadata, "state_dict_metadata", None), dict
    ):
        raise UnreadableInput(shown, "the pickle is not a DCP Metadata object")
    if not isinstance(getattr(metadata, "storage_data", None), dict):
        raise UnreadableInput(shown, "the metadata does not say where tensors are stored")
    return metadata


def _vetted_reader(folder: Path, metadata: Any) -> Any:
    """A FileSystemReader that never unpickles `.metadata` itself: it returns ours."""
    from torch.distributed.checkpoint.filesystem import FileSystemReader
    from torch.distributed.checkpoint.metadata import StorageMeta

    class VettedMetadataReader(FileSystemReader):
        def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
            if metadata.storage_meta is None:
                metadata.storage_meta = StorageMeta()
            metadata.storage_meta.load_id = self.load_id
            return metadata

    return VettedMetadataReader(folder)


def load_tensor(folder: Path, metadata: Any, key: str, display_path: str) -> torch.Tensor:
    """One tensor entry, assembled from its chunks (all ranks' shards) into a fresh CPU tensor."""
    import torch
    from torch.distributed.checkpoint.api import CheckpointException
    from torch.distributed.checkpoint.state_dict_loader import load

    entry = metadata.state_dict_metadata[key]
    target = torch.empty(tuple(entry.size), dtype=entry.properties.dtype)
    try:
        with warnings.catch_warnings():
            # "torch.distributed is unavailable or uninitialized": one process is the intent.
            warnings.simplefilter("ignore")
            load({key: target}, storage_reader=_vetted_reader(folder, metadata), no_dist=True)
    # A truncated or damaged shard file: explain, never a traceback. DCP wraps the per-rank
    # failure in CheckpointException, which derives from BaseException.
    except (Exception, CheckpointException) as error:
        raise UnreadableInput(
            display_path, f"tensor {key} cannot be read ({_root_cause(error)})"
        ) from error
    return target


def _root_cause(error: BaseException) -> str:
    failures = getattr(error, "failures", None)
    if isinstance(failures, dict) and failures:
        error = next(iter(failures.values()))[0]
    text = str(error).strip()
    name = type(error).__name__
    return f"{name}: {text.splitlines()[0][:200]}" if text else name


def load_bytes_item(
    folder: Path, metadata: Any, key: str, display_path: str, options: LoadOptions
) -> Any:
    """A non-tensor entry (a torch.save'd Python value), through safe_torch_load."""
    from torch.distributed.checkpoint.metadata import MetadataIndex

    where = metadata.storage_data.get(MetadataIndex(key))
    if where is None:
        raise UnreadableInput(display_path, f"entry {key} has no storage record")
    if getattr(where, "transform_descriptors", None):
        # Compressed or otherwise transformed records need torch's extension registry.
        raise UnreadableInput(display_path, f"entry {key} is stored transformed; not supported")
    data_file = folder / where.relative_path
    if data_file.parent != folder:  # a relative path escaping the folder is not DCP's doing
        raise UnreadableInput(display_path, f"entry {key} points outside the checkpoint")
    try:
        with data_file.open("rb") as handle:
            handle.seek(where.offset)
            payload = handle.read(where.length)
    except OSError as error:
        raise UnreadableInput(display_path, f"entry {key}: {error.strerror or error}") from error
    if len(payload) != where.length:
        raise UnreadableInput(display_path, f"entry {key} is cut short (truncated data file)")
    # safe_torch_load reads paths; the record is copied to a private temporary file (never next
    # to the input) so that it goes through the one vetted loader.
    with tempfile.TemporaryDirectory(prefix="tscope-dcp-") as scratch:
        record = Path(scratch) / "record.pt"
        record.write_bytes(payload)
        return safe_torch_load(record, f"{display_path} (entry {key})", options)
