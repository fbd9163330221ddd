"""DeepSpeed's pickled helper objects, and per-parameter state out of flat ZeRO-1/2/3 partitions.

DeepSpeed optimizer files (`[bf16_]zero_pp_rank_{dp}_mp_rank_{mp}_optim_states.pt`) pickle a few
DeepSpeed objects next to the tensors: the loss scaler, the ZeRO stage enum and the
`fragment_address(numel, start)` tuples of `param_slice_mappings` (deepspeed 0.19.8). A
`weights_only` load refuses them. We allow-list them under their DeepSpeed names but bind the
names to our own plain stand-ins, so loading never imports or runs DeepSpeed code: the stand-ins
only store the values the pickle hands them. Any other global is still refused.

ZeRO-1/2 keep, per param group, one flat fp32 buffer of all parameters (in `param_shapes` order)
cut into equal contiguous partitions, one per data-parallel rank. Each rank file holds its
partition (`single_partition_of_fp32_groups[g]`: the fp32 masters), the base optimizer's state
over the same partition (`base_optimizer_state["state"][g]`: flat `exp_avg`, `exp_avg_sq`, `step`)
and where each parameter's fragment sits in it (`param_slice_mappings[g][name]`). A parameter is
its fragments concatenated in rank order (what `ds_to_universal` does); parameters inside one
partition are views of the memory-mapped file, not copies.

ZeRO-3 splits each parameter itself: rank r holds values [r·k, (r+1)·k) of it, k = ceil(numel /
ranks), and its flat group (`fp32_flat_groups[g]`, the base optimizer's `optimizer_state_dict`
over the same layout) is those slices in `param_shapes` order. The model file keeps only empty
placeholders, so the fp32 masters rebuilt here are the checkpoint's weights.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.safe_load import safe_torch_load

if TYPE_CHECKING:
    import torch


class ZeroStage(int):
    """Stand-in for deepspeed.runtime.zero.config.ZeroStageEnum (an int enum: 0, 1, 2, 3)."""


class PickledAttributes:
    """Stand-in for objects pickled as their attribute dict (created empty, then filled)."""

    def __repr__(self) -> str:
        return f"{type(self).__name__}({vars(self)})"


class FragmentAddress(PickledAttributes):
    """Stand-in for deepspeed.utils.tensor_fragment.fragment_address (a dataclass)."""

    numel: int  # values of the parameter in this rank's partition
    start: int  # offset of the first one in the partition

    def __init__(self, numel: int = 0, start: int = 0) -> None:
        self.numel, self.start = numel, start


class LossScaler(PickledAttributes):
    """deepspeed.runtime.fp16.loss_scaler.LossScaler: `cur_scale`, `dynamic`."""


class DynamicLossScaler(PickledAttributes):
    """deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler: `cur_scale`, `cur_iter`,
    `last_overflow_iter`, `scale_factor`, `scale_window`, ..."""


class Namespace(PickledAttributes):
    """argparse.Namespace, which Megatron-DeepSpeed saves as `args` in the model states."""


STAND_INS: tuple[tuple[Any, str], ...] = (
    (ZeroStage, "deepspeed.runtime.zero.config.ZeroStageEnum"),
    (FragmentAddress, "deepspeed.utils.tensor_fragment.fragment_address"),
    (LossScaler, "deepspeed.runtime.fp16.loss_scaler.LossScaler"),
    (DynamicLossScaler, "deepspeed.runtime.fp16.loss_scaler.DynamicLossScaler"),
    (Namespace, "argparse.Namespace"),
)


def load_deepspeed_file(path: Path, display_path: str, options: LoadOptions) -> Any:
    """safe_torch_load with DeepSpeed's helper classes bound to the inert stand-ins above."""
    import torch

    with torch.serialization.safe_globals(list(STAND_INS)):
        return safe_torch_load(path, display_path, options)


@dataclass
class ZeroState:
    """Per-parameter fp32 masters and Adam moments rebuilt from the rank files."""

    masters: dict[str, torch.Tensor] = field(default_factory=dict)
    moments: dict[str, dict[str, Any]] = field(default_factory=dict)
    group_of: dict[str, int] = field(default_factory=dict)
    param_groups: list[dict[str, Any]] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)
    loss_scaler: Any = None
    zero_stage: int | None = None


def rebuild_zero_state(
    rank_states: Sequence[Mapping[str, Any]],
    param_shapes: Sequence[Mapping[str, Any]],
) -> ZeroState:
    """`rank_states[r]` is rank r's `optimizer_state_dict`; `param_shapes` from the model file."""
    result = ZeroState()
    first = rank_states[0]
    result.loss_scaler = first.get("loss_scaler")
    stage = first.get("zero_stage")
    result.zero_stage = int(stage) if isinstance(stage, int) else None
    base = _base_state(first)
    groups = base.get("param_groups") if isinstance(base, Mapping) else None
    result.param_groups = [
        {k: v for k, v in g.items() if k != "params"}
        for g in (groups if isinstance(groups, list) else [])
        if isinstance(g, Mapping)
    ]
    zero3 = result.zero_stage == 3
    if zero3 and not _all_ranks_present(result, rank_states):
        return result
    for group_index, shapes in enumerate(param_shapes):
        _rebuild_group(result, rank_states, group_index, shapes, zero3)
    return result


def _base_state(rank_state: Mapping[str, Any]) -> Any:
    """The base (torch) optimizer's state_dict: `base_optimizer_state` under ZeRO-1/2,
    `optimizer_state_dict` under ZeRO-3."""
    base = rank_state.get("base_optimizer_state")
    return base if base is not None else rank_state.get("optimizer_state_dict")


def _all_ranks_present(result: ZeroState, rank_states: Sequence[Mapping[str, Any]]) -> bool:
    """ZeRO-3 splits every parameter over all ranks: without every rank's file, none is whole."""
    counts = {state.get("partition_count") for state in rank_states}
    expected = counts.pop() if len(counts) == 1 else None
    if not isinstance(expected, int) or expected != len(rank_states):
        result.unmapped.append(
            f"ZeRO-3 splits every parameter over {expected} ranks, {len(rank_states)} rank "
            "file(s) are here: no parameter can be rebuilt"
        )
        return False
    return True


def _rebuild_group(
    result: ZeroState,
    rank_states: Sequence[Mapping[str, Any]],
    group_index: int,
    shapes: Mapping[str, Any],
    zero3: bool = False,
) -> None:
    flats: list[dict[str, Any]] = []  # per rank: "fp32", "exp_avg", "exp_avg_sq", "step"
    fragments: list[Mapping[str, Any]] = []
    for rank, state in enumerate(rank_states):
        partitions = state.get("fp32_flat_groups" if zero3 else "single_partition_of_fp32_groups")
        base = _base_state(state)
        moments = base.get("state", {}).get(group_index) if isinstance(base, Mapping) else None
        if not isinstance(partitions, list) or group_index >= len(partitions):
            result.unmapped.append(f"group {group_index}: rank {rank} holds no fp32 partition")
            return
        flats.append({"fp32": partitions[group_index], **(moments or {})})
        mappings = state.get("param_slice_mappings")
        fragments.append(
            mappings[group_index]
            if isinstance(mappings, list) and group_index < len(mappings)
            else {}
        )
    if zero3:
        fragments = _zero3_fragments(result, flats, shapes, group_index)
    elif not any(fragments):
        fragments = _fragments_from_order(result, flats, shapes, group_index, rank_states)
        if not fragments:
            return
    step = flats[0].get("step")
    for name, shape in shapes.items():
        numel = math.prod(int(d) for d in shape)
        pieces = [(rank, f[name]) for rank, f in enumerate(fragments) if name in f]
        found = sum(int(address.numel) for _, address in pieces)
        if found != numel:
            result.unmapped.append(
                f"{name}: its fragments hold {found} of {numel} values (group {group_index})"
            )
            continue
        result.group_of[name] = group_index
        result.masters[name] = _assemble(flats, pieces, "fp32", shape)
        entry: dict[str, Any] = {"step": float(step) if step is not None else None}
        for slot in ("exp_avg", "exp_avg_sq"):
            if all(slot in flats[rank] for rank, _ in pieces):
                entry[slot] = _assemble(flats, pieces, slot, shape)
        if "exp_avg" in entry:
            result.moments[name] = entry


def _assemble(
    flats: list[dict[str, Any]], pieces: list[tuple[int, Any]], slot: str, shape: Any
) -> torch.Tensor:
    import torch

    parts = [flats[rank][slot].narrow(0, int(a.start), int(a.numel)) for rank, a in pieces]
    flat = parts[0] if len(parts) == 1 else torch.cat(parts)  # one fragment: a view, no copy
    return flat.view(tuple(int(d) for d in shape))


def _fragments_from_order(
    result: ZeroState,
    flats: list[dict[str, Any]],
    shapes: Mapping[str, Any],
    group_index: int,
    rank_states: Sequence[Mapping[str, Any]],
) -> list[Mapping[str, Any]]:
    """Older DeepSpeed without param_slice_mappings: one rank, parameters packed in order."""
    if len(flats) != 1:
        result.unmapped.append(
            f"group {group_index}: no param_slice_mappings and {len(flats)} ranks; where each "
            "rank's partition starts inside a parameter is not recorded"
        )
        return []
    paddings = rank_states[0].get("group_paddings")
    padding = int(paddings[group_index]) if isinstance(paddings, list) else 0
    total = sum(math.prod(int(d) for d in shape) for shape in shapes.values())
    stored = int(flats[0]["fp32"].numel())
    if total + padding != stored:
        result.unmapped.append(
            f"group {group_index}: parameters hold {total} values plus {padding} padding, "
            f"the partition {stored}; not mapped"
        )
        return []
    start, out = 0, {}
    for name, shape in shapes.items():
        numel = math.prod(int(d) for d in shape)
        out[name] = FragmentAddress(numel, start)
        start += numel
    return [out]


def _zero3_fragments(
    result: ZeroState,
    flats: list[dict[str, Any]],
    shapes: Mapping[str, Any],
    group_index: int,
) -> list[Mapping[str, Any]]:
    """Where each parameter sits in each rank's ZeRO-3 flat group: every parameter is split into
    ranks equal slices of ceil(numel / ranks) values (the last ones padded), and a rank's flat
    group is its slices in `param_shapes` order, each at the same offset on every rank."""
    ranks = len(flats)
    out: list[Mapping[str, Any]] = []
    slices: list[dict[str, FragmentAddress]] = [{} for _ in range(ranks)]
    offset = 0
    for name, shape in shapes.items():
        numel = math.prod(int(d) for d in shape)
        part = -(-numel // ranks)
        for rank in range(ranks):
            held = min(part, numel - rank * part)
            if held > 0:
                slices[rank][name] = FragmentAddress(held, offset)
        offset += part
    stored = {int(flat["fp32"].numel()) for flat in flats}
    if len(stored) != 1 or offset > stored.pop():
        result.unmapped.append(
            f"group {group_index}: the parameters' ZeRO-3 slices need {offset} values per rank, "
            "the ranks' flat groups hold a different number; not mapped"
        )
        return []
    out.extend(slices)
    return out
