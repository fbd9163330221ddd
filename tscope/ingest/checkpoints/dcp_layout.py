"""What each key of a DCP folder is: model parameter, Adam moment, param-group entry, loop state.

DCP flattens the saved state dict with dots (`model.layers.0.attn.q.weight`,
`optimizer.state.layers.0.attn.q.weight.exp_avg`, `optimizer.param_groups.0.lr`), so the kind
of an entry is read from its key and from which roots the folder holds; nothing is loaded here
but the (vetted) metadata.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints import dcp_storage
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.state_dict_files import normalize_name
from tscope.model import PartialInput

SHARD_FILE = re.compile(r"^__(\d+)_(\d+)\.distcp$")
OPTIMIZER_ROOTS = ("optim", "optimizer", "optimizers", "opt")
MOMENT = re.compile(r"^(?P<fqn>.+)\.(?P<slot>exp_avg|exp_avg_sq|max_exp_avg_sq|step)$")
# Top-level entries that belong to the training loop, not to the model (torchtitan, accelerate).
LOOP_ROOTS = frozenset(
    {"lr_scheduler", "lr_schedulers", "scheduler", "dataloader", "data_loader", "sampler",
     "train_state", "step", "global_step", "epoch", "rng", "rng_state", "rng_states", "scaler",
     "grad_scaler", "extra_state", "model_args", "config"}
)  # fmt: skip
SCHEDULER_ROOTS = ("lr_scheduler", "lr_schedulers", "scheduler")
SAMPLER_ROOTS = ("dataloader", "data_loader", "sampler")
STEP_KEYS = ("step", "global_step", "train_state.step", "iteration")
HYPER_KEYS = ("lr", "eps", "betas", "weight_decay")  # what the analyzers use from a group


@dataclass
class DcpFolder:
    """One DCP folder: where it is, how it is shown, its vetted metadata."""

    path: Path
    shown: str
    metadata: Any
    tensor_keys: list[str] = field(default_factory=list)
    bytes_keys: list[str] = field(default_factory=list)
    ranks: set[int] = field(default_factory=set)


Where = tuple[DcpFolder, str]  # the folder and the key an entry is stored under


@dataclass
class KeyLayout:
    model: dict[str, Where] = field(default_factory=dict)  # normalized name -> entry
    moments: dict[str, dict[str, Where]] = field(default_factory=dict)  # name -> slot -> entry
    groups: list[tuple[DcpFolder, str, str]] = field(default_factory=list)  # folder, root, prefix
    loop_roots: set[str] = field(default_factory=set)  # lr_scheduler, dataloader, ...


def _well_formed(entry: Any) -> bool:
    """A tensor entry a damaged .metadata can still describe: integer shape and a torch dtype
    (the restricted unpickler builds objects whose fields a flipped byte may have dropped)."""
    import torch

    size = getattr(entry, "size", None)
    dtype = getattr(getattr(entry, "properties", None), "dtype", None)
    try:
        dims = [int(d) for d in size]  # type: ignore[union-attr]
    except (TypeError, ValueError):
        return False
    return all(d >= 0 for d in dims) and isinstance(dtype, torch.dtype)


def load_folder(
    path: Path, shown: str, options: LoadOptions, partial: list[PartialInput]
) -> DcpFolder:
    """A folder's vetted metadata and its keys by kind; missing shard files go to partial."""
    from torch.distributed.checkpoint.metadata import (
        BytesStorageMetadata,
        TensorStorageMetadata,
    )

    metadata = dcp_storage.read_metadata(path, shown, options)
    folder = DcpFolder(path=path, shown=shown, metadata=metadata)
    damaged = []
    for key, entry in metadata.state_dict_metadata.items():
        if isinstance(entry, TensorStorageMetadata):
            if _well_formed(entry):
                folder.tensor_keys.append(key)
            else:
                damaged.append(key)
        elif isinstance(entry, BytesStorageMetadata):
            folder.bytes_keys.append(key)
    if damaged and not folder.tensor_keys:
        raise UnreadableInput(shown, "every tensor entry of .metadata is damaged (no shape/dtype)")
    if damaged:
        partial.append(
            PartialInput(shown, f"damaged .metadata entries skipped: {', '.join(damaged[:5])}")
        )
    files = {str(getattr(where, "relative_path", "")) for where in metadata.storage_data.values()}
    for file in files:
        match = SHARD_FILE.match(file)
        if match:
            folder.ranks.add(int(match.group(1)))
    missing = sorted(file for file in files if not (path / file).is_file())
    if missing and len(missing) == len(files):
        raise UnreadableInput(shown, "every shard file listed in .metadata is missing")
    if missing:  # the tensors stored elsewhere still read; these fail one by one
        partial.append(
            PartialInput(
                shown, f"shard files listed in .metadata are missing: {', '.join(missing)}"
            )
        )
    return folder


def classify(folder: DcpFolder, layout: KeyLayout) -> None:
    """Sort one folder's keys into model parameters, Adam moments and param-group entries."""
    roots = {key.split(".", 1)[0] for key in folder.tensor_keys + folder.bytes_keys}
    optimizer_roots = [
        root
        for root in OPTIMIZER_ROOTS
        if root in roots and any(k.startswith(f"{root}.state.") for k in folder.tensor_keys)
    ]
    if not optimizer_roots and any(k.startswith("state.") for k in folder.tensor_keys):
        optimizer_roots = [""]  # get_optimizer_state_dict saved on its own
    prefixes = tuple(f"{root}." if root else "" for root in optimizer_roots)
    for key in folder.tensor_keys:
        prefix = next((p for p in prefixes if key.startswith(f"{p}state.")), None)
        if prefix is not None:
            match = MOMENT.match(key[len(prefix) + len("state.") :])
            if match:
                name = normalize_name(match["fqn"])
                layout.moments.setdefault(name, {})[match["slot"]] = (folder, key)
    for prefix in prefixes:
        layout.groups.append((folder, prefix, f"{prefix}param_groups."))
    model_keys = [k for k in folder.tensor_keys if k.startswith("model.")]
    if model_keys:
        layout.model.update({normalize_name(k[len("model.") :]): (folder, k) for k in model_keys})
    else:  # torchtitan / bare model state dict: FQNs at the top level
        excluded = set(optimizer_roots) | LOOP_ROOTS | {"state", "param_groups"}
        for key in folder.tensor_keys:
            if key.split(".", 1)[0] not in excluded:
                layout.model[normalize_name(key)] = (folder, key)
    layout.loop_roots |= roots & LOOP_ROOTS
