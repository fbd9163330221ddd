"""What each key of a DCP folder is: model parameter, Adam moment, param-group entry, loop state.

DCP flattens the saved state dict with dots (`model.layers.0.attn.q.weight`,
`optimizer.state.layers.0.attn.q.weight.exp_avg`, `optimizer.param_groups.0.lr`), so the kind
of an entry is read from its key and from which roots the folder holds; nothing is loaded here
but the (vetted) metadata.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints import dcp_storage
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.dcp_chunks import drop_shared_records
from tscope.ingest.checkpoints.dcp_metadata import DcpMetadata
from tscope.ingest.checkpoints.state_dict_files import normalize_name
from tscope.ingest.readers.text_logs import parse_int
from tscope.ingest.safe_fs import is_inside, is_regular_file
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
    """One DCP folder: where it is, how it is shown, its metadata (plain data)."""

    path: Path
    shown: str
    metadata: DcpMetadata
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


def _well_formed(dtype_name: str) -> bool:
    """A tensor entry tscope can allocate: its dtype is one torch knows."""
    import torch

    return isinstance(getattr(torch, dtype_name, None), torch.dtype)


def load_folder(
    path: Path, shown: str, options: LoadOptions, partial: list[PartialInput]
) -> DcpFolder:
    """A folder's metadata and its keys by kind; missing or refused shard files go to partial."""
    metadata = dcp_storage.read_metadata(path, shown, options)
    folder = DcpFolder(path=path, shown=shown, metadata=metadata)
    damaged = list(metadata.damaged)
    for key, entry in metadata.tensors.items():
        if _well_formed(entry.dtype_name):
            folder.tensor_keys.append(key)
        else:
            damaged.append(key)
    folder.bytes_keys.extend(metadata.bytes_keys)
    if damaged and not folder.tensor_keys:
        raise UnreadableInput(shown, "every tensor entry of .metadata is damaged (no shape/dtype)")
    if damaged:
        partial.append(
            PartialInput(shown, f"damaged .metadata entries skipped: {', '.join(damaged[:5])}")
        )
    shared = drop_shared_records(path, metadata)
    if shared:
        partial.append(
            PartialInput(
                shown,
                f"{shared} storage record(s) in .metadata share bytes with another record; torch "
                "writes each item to its own bytes, so the entries stored there are not read",
            )
        )
    files = {record.relative_path for record in metadata.storage.values()}
    for file in files:
        match = SHARD_FILE.match(file)
        # The name comes from .metadata, not the disk: 5,000 digits once reached int() (ValueError).
        rank = parse_int(match.group(1)) if match else None
        if rank is not None:
            folder.ranks.add(rank)
    refused, missing = [], []
    for file in sorted(files):
        relative = PurePosixPath(file)
        if relative.is_absolute() or ".." in relative.parts or not is_inside(path, path / file):
            refused.append(file)
        elif not is_regular_file(path / file):
            missing.append(file)
    if refused:  # never opened: each tensor stored there fails with the same reason
        partial.append(
            PartialInput(
                shown,
                f"shard files named in .metadata lie outside the checkpoint and are not read: "
                f"{_listed(refused)}",
            )
        )
    if files and len(missing) + len(refused) == len(files):
        raise UnreadableInput(
            shown,
            "every shard file listed in .metadata is missing (or not a regular file inside "
            "the checkpoint)",
        )
    if missing:  # the tensors stored elsewhere still read; these fail one by one
        partial.append(
            PartialInput(
                shown,
                f"shard files listed in .metadata are missing (or not regular files): "
                f"{_listed(missing)}",
            )
        )
    return folder


# How many of the shard names .metadata lists a partial line shows, and how much of each: the
# names are a stranger's text (a crafted file listed one of 5,000 characters, or thousands).
NAMES_SHOWN = 5
NAME_SHOWN_CHARS = 120


def _listed(names: list[str]) -> str:
    shown = [
        repr(name if len(name) <= NAME_SHOWN_CHARS else name[:NAME_SHOWN_CHARS] + "…")
        for name in names[:NAMES_SHOWN]
    ]
    more = f" and {len(names) - NAMES_SHOWN} more" if len(names) > NAMES_SHOWN else ""
    return ", ".join(shown) + more


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
