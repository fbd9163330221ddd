"""Restore an FSDP2-sharded model and its optimizer from a DCP folder, each rank its own shard.

The entry's build_model(None) builds the model on every rank (a DCP folder holds no model config),
(on the meta device too: then only the shards get storage, and every parameter and buffer must
be in the folder), then it is sharded with `fully_shard` over a 1-D CPU/GPU mesh: the entry's
`shard_model(model, mesh)` when it defines one, else every module of each nn.ModuleList (the
blocks) and then the root, FSDP2's usual wrapping. Each DTensor parameter and Adam moment is then
filled from only the DCP chunks overlapping this rank's shard (dcp_storage.load_tensor_region),
read through the project's metadata decoder: `.metadata` is decoded at opcode level, never
unpickled, and torch's own DCP loader (which unpickles it) is never called.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope.errors import UnreadableInput, UsageError
from tscope.ingest.checkpoints import dcp_storage
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.dcp_chunks import drop_shared_records
from tscope.ingest.checkpoints.dcp_layout import HYPER_KEYS, OPTIMIZER_ROOTS
from tscope.ingest.checkpoints.dcp_metadata import DcpMetadata
from tscope.replay.entry import Entry

if TYPE_CHECKING:
    import torch

_SAFE = LoadOptions(trust_pickle=False)
MODEL_ROOTS = ("model", "")  # `{"model": get_model_state_dict(...)}` or a bare model state dict
MOMENTS = ("exp_avg", "exp_avg_sq", "max_exp_avg_sq", "momentum_buffer")


@dataclass
class ShardedRestored:
    model: torch.nn.Module
    optimizer: torch.optim.Optimizer
    optimizer_restored: bool
    checkpoint_group_lrs: list[float]
    notes: list[str] = field(default_factory=list)
    caveats: list[str] = field(default_factory=list)


def read_folder_metadata(folder: Path, shown: str) -> DcpMetadata:
    """The folder's metadata, refused when records share bytes: torch writes each item to its
    own bytes, and records spelled onto one region make each read of it a load per record (the
    same folder-wide check `tscope analyze` makes; a replay needs every entry, so it stops)."""
    metadata = dcp_storage.read_metadata(folder, shown, _SAFE)
    shared = drop_shared_records(folder, metadata)
    if shared:
        raise UnreadableInput(
            shown,
            f"{shared} storage record(s) in .metadata share bytes with another record; torch "
            "writes each item to its own bytes, so this folder cannot be restored",
            "Replay from another checkpoint folder of the run (`tscope analyze` reads the rest "
            "of this one)",
        )
    return metadata


def saved_group_lrs(folder: Path, shown: str, metadata: DcpMetadata) -> list[float]:
    """The learning rate each saved param group ran its last update with."""
    root = _optimizer_root(metadata)
    lrs = []
    index = 0
    while root is not None and f"{root}.param_groups.{index}.lr" in metadata.bytes_keys:
        key = f"{root}.param_groups.{index}.lr"
        value = dcp_storage.load_bytes_item(folder, metadata, key, shown, _SAFE)
        if not isinstance(value, (int, float)) or isinstance(value, bool):
            raise UnreadableInput(shown, f"entry {key} is not a number")
        lrs.append(float(value))
        index += 1
    return lrs


def restore_sharded(
    folder: Path, shown: str, entry: Entry, mesh: Any, device: torch.device
) -> ShardedRestored:
    import torch

    if entry.build_model is None:
        raise UsageError(
            f"{entry.path}: a sharded replay needs build_model(config) in the entry file (a DCP "
            "checkpoint stores weights, not the model's code or config)."
        )
    metadata = read_folder_metadata(folder, shown)
    model = entry.build_model(None)
    if not isinstance(model, torch.nn.Module):
        raise UsageError(
            f"{entry.path}: build_model returned {type(model).__name__}, no nn.Module."
        )
    # A model built on the meta device (too big for one rank) gets storage only for its shards.
    on_meta = any(t.is_meta for t in [*model.parameters(), *model.buffers()])
    if not on_meta:
        model = model.to(device)
    _shard(model, mesh, entry)
    if on_meta:
        model.to_empty(device=device)  # every parameter and buffer is then read from the folder
    notes = [f"model sharded with FSDP2 fully_shard over {mesh.size()} ranks"]
    root = _model_root(model, metadata, shown)
    with torch.no_grad():
        for name, tensor in [*model.named_parameters(), *model.named_buffers()]:
            key = f"{root}.{name}" if root else name
            if key not in metadata.tensors:
                raise UnreadableInput(shown, f"holds no entry {key} for the model's {name}")
            _fill(tensor, folder, metadata, key, shown)
    notes.append(f"weights restored shard by shard from {shown} (DCP, metadata decoded safely)")
    optimizer = _build_optimizer(model, entry)
    restored, caveats = _restore_optimizer(model, optimizer, folder, metadata, shown)
    if restored:
        notes.append(f"optimizer state restored shard by shard from {shown}")
    return ShardedRestored(
        model=model,
        optimizer=optimizer,
        optimizer_restored=restored,
        checkpoint_group_lrs=saved_group_lrs(folder, shown, metadata),
        notes=notes,
        caveats=caveats,
    )


def _shard(model: torch.nn.Module, mesh: Any, entry: Entry) -> None:
    import torch
    from torch.distributed.fsdp import fully_shard

    custom = getattr(entry, "shard_model", None)
    if callable(custom):
        custom(model, mesh)
        return
    for module in model.modules():
        if isinstance(module, torch.nn.ModuleList):
            for child in module:
                if any(True for _ in child.parameters()):
                    fully_shard(child, mesh=mesh)
    fully_shard(model, mesh=mesh)


def _model_root(model: torch.nn.Module, metadata: DcpMetadata, shown: str) -> str:
    names = [name for name, _ in model.named_parameters()]
    for root in MODEL_ROOTS:
        if names and all((f"{root}.{n}" if root else n) in metadata.tensors for n in names):
            return root
    missing = names[0] if names else "?"
    raise UnreadableInput(
        shown,
        f"holds no weights for the entry's model (no `model.{missing}` or `{missing}` entry): "
        "is build_model the model this run trained?",
    )


def _fill(tensor: Any, folder: Path, metadata: DcpMetadata, key: str, shown: str) -> None:
    """Copy this rank's part of entry `key` into `tensor` (a DTensor shard or a plain tensor)."""
    from torch.distributed.tensor import DTensor

    entry = metadata.tensors[key]
    if tuple(entry.size) != tuple(tensor.shape):
        raise UnreadableInput(
            shown,
            f"entry {key} has shape {list(entry.size)}, the model's {list(tensor.shape)}: is "
            "build_model the model this run trained?",
        )
    if isinstance(tensor, DTensor):
        local = tensor.to_local()
        chunks = tensor.__create_chunk_list__()  # type: ignore[no-untyped-call]
        offsets = tuple(int(v) for v in chunks[0].offsets) if chunks else (0,) * tensor.dim()
        sizes = tuple(int(v) for v in chunks[0].sizes) if chunks else tuple(local.shape)
        region = dcp_storage.load_tensor_region(folder, metadata, key, offsets, sizes, shown)
        local.copy_(region.reshape(local.shape))
    else:
        tensor.copy_(dcp_storage.load_tensor(folder, metadata, key, shown))


def _build_optimizer(model: torch.nn.Module, entry: Entry) -> torch.optim.Optimizer:
    import torch

    if entry.build_optimizer is not None:
        optimizer = entry.build_optimizer(model)
        if not isinstance(optimizer, torch.optim.Optimizer):
            raise UsageError(
                f"{entry.path}: build_optimizer returned {type(optimizer).__name__}, not a "
                "torch.optim.Optimizer."
            )
        return optimizer
    return torch.optim.AdamW(model.parameters())  # hyper-parameters come from the checkpoint


def _optimizer_root(metadata: DcpMetadata) -> str | None:
    keys = [*metadata.tensors, *metadata.bytes_keys]
    for root in OPTIMIZER_ROOTS:
        if any(
            k.startswith(f"{root}.state.") or k.startswith(f"{root}.param_groups.") for k in keys
        ):
            return root
    return None


def _restore_optimizer(
    model: torch.nn.Module,
    optimizer: torch.optim.Optimizer,
    folder: Path,
    metadata: DcpMetadata,
    shown: str,
) -> tuple[bool, list[str]]:
    """Adam moments and step counts per parameter, hyper-parameters per group."""
    import torch

    root = _optimizer_root(metadata)
    if root is None:
        return False, [f"{shown} holds no optimizer state: the optimizer restarts from zero"]
    names = {id(p): n for n, p in model.named_parameters()}
    for index, group in enumerate(optimizer.param_groups):
        for hyper in HYPER_KEYS:
            key = f"{root}.param_groups.{index}.{hyper}"
            if key in metadata.bytes_keys and hyper in group:
                value = dcp_storage.load_bytes_item(folder, metadata, key, shown, _SAFE)
                group[hyper] = tuple(value) if isinstance(value, (list, tuple)) else value
        for parameter in group["params"]:
            name = names[id(parameter)]
            state: dict[str, Any] = {}
            step_key = f"{root}.state.{name}.step"
            if step_key in metadata.tensors:
                step = dcp_storage.load_tensor(folder, metadata, step_key, shown)
                state["step"] = step.to(torch.float32).reshape(())
            for moment in MOMENTS:
                key = f"{root}.state.{name}.{moment}"
                if key in metadata.tensors:
                    buffer = torch.zeros_like(parameter)  # the parameter's sharding
                    _fill(buffer, folder, metadata, key, shown)
                    state[moment] = buffer
            if not state:
                raise UnreadableInput(shown, f"holds no optimizer state for {name}")
            optimizer.state[parameter] = state
    return True, []
