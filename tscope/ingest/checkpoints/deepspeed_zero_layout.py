"""One ZeRO param group's layout as the rank files hold it, checked before anything is cut: the
parameter shapes, each rank's flat fp32 partition and Adam moments, and where each parameter's
fragment sits in it (whole numbers inside the partition, no two overlapping). Forged values are
refused with a one-line reason in the state's `unmapped` notes (deepspeed_zero.py rebuilds)."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from itertools import pairwise
from typing import TYPE_CHECKING, Any, TypeGuard

from tscope.ingest.checkpoints.deepspeed_pickle import FragmentAddress

if TYPE_CHECKING:
    import torch

    from tscope.ingest.checkpoints.deepspeed_zero import ZeroState

MOMENT_SLOTS = ("exp_avg", "exp_avg_sq")
MAX_DIM = 2**62  # a larger shape dimension overflows torch's int64 sizes


def base_state(rank_state: Mapping[str, Any]) -> Any:
    """The base (torch) optimizer's state_dict: `base_optimizer_state` under ZeRO-1/2,
    `optimizer_state_dict` under ZeRO-3."""
    base = rank_state.get("base_optimizer_state")
    return base if base is not None else rank_state.get("optimizer_state_dict")


def parse_shapes(shapes: Mapping[Any, Any]) -> tuple[dict[str, tuple[int, ...]], list[str]]:
    """Names and shapes (tuples of non-negative ints) of one group's `param_shapes`; the
    entries that are neither, as problems."""
    parsed: dict[str, tuple[int, ...]] = {}
    bad: list[str] = []
    for name, value in shapes.items():
        shape = _shape(value)
        if not isinstance(name, str):
            bad.append(f"param_shapes names a parameter by a {type(name).__name__}, not a string")
        elif shape is None:
            bad.append(f"param_shapes: the shape of {shown_name(name)} is not a list of sizes")
        else:
            parsed[name] = shape
    return parsed, bad


def _shape(value: Any) -> tuple[int, ...] | None:
    if not isinstance(value, (list, tuple)):  # torch.Size is a tuple
        return None
    dims = tuple(value)
    if all(is_int(d) and 0 <= d <= MAX_DIM for d in dims):
        return dims
    return None


def flat_groups(
    result: ZeroState,
    rank_states: Sequence[Mapping[str, Any]],
    group_index: int,
    zero3: bool,
) -> list[dict[str, Any]] | None:
    """Per rank: its fp32 partition of the group ("fp32"), the moments over the same partition
    ("exp_avg", "exp_avg_sq", each only where it is a flat tensor of the partition's size) and
    "step" (rank 0's, a finite number or None)."""
    flats: list[dict[str, Any]] = []
    problems: list[str] = []
    for rank, state in enumerate(rank_states):
        partitions = state.get("fp32_flat_groups" if zero3 else "single_partition_of_fp32_groups")
        if not isinstance(partitions, (list, tuple)) or group_index >= len(partitions):
            result.unmapped.append(
                f"group {group_index}: {rank_file(result, rank)} holds no fp32 partition"
            )
            return None
        fp32 = flat_tensor(partitions[group_index])
        if fp32 is None:
            result.unmapped.append(
                f"group {group_index}: {rank_file(result, rank)}: the fp32 partition is not a "
                "flat floating-point tensor; not mapped"
            )
            return None
        flat: dict[str, Any] = {"fp32": fp32}
        base = base_state(state)
        per_group = base.get("state") if isinstance(base, Mapping) else None
        moments = per_group.get(group_index) if isinstance(per_group, Mapping) else None
        if moments is not None and not isinstance(moments, Mapping):
            problems.append(
                f"{rank_file(result, rank)}: the optimizer state is a {type(moments).__name__}"
            )
            moments = None
        for slot in MOMENT_SLOTS:
            value = moments.get(slot) if moments is not None else None
            if value is None:
                continue
            tensor = flat_tensor(value)
            if tensor is None or tensor.numel() != fp32.numel():
                problems.append(
                    f"{rank_file(result, rank)}: {slot} is not a flat tensor of the partition's size"
                )
            else:
                flat[slot] = tensor
        flat["step"] = step_number(moments.get("step")) if moments is not None else None
        flats.append(flat)
    if problems:
        result.unmapped.append(
            f"group {group_index}: {problems[0]}: its Adam moments are not mapped"
            + (f" ({len(problems) - 1} more problem(s) alike)" if len(problems) > 1 else "")
        )
    return flats


def flat_tensor(value: Any) -> torch.Tensor | None:
    """`value` when it is a contiguous 1-D floating-point tensor (a ZeRO partition), else None."""
    import torch

    if (
        isinstance(value, torch.Tensor)
        and value.dim() == 1
        and value.is_floating_point()
        and value.is_contiguous()
    ):
        return value
    return None


def step_number(value: Any) -> float | None:
    """An optimizer's `step` (a number or a one-value tensor) as a finite float, else None."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.numel() != 1 or value.is_complex():
            return None
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    try:
        number = float(value)
    except OverflowError:  # an int past float's range
        return None
    return number if math.isfinite(number) else None


def slice_mappings(
    result: ZeroState, rank_states: Sequence[Mapping[str, Any]], group_index: int
) -> list[Mapping[str, Any]] | None:
    """Each rank's `param_slice_mappings[group]` ({} where the rank records none); None (with
    the reason noted) when one is not a mapping."""
    fragments: list[Mapping[str, Any]] = []
    for rank, state in enumerate(rank_states):
        mappings = state.get("param_slice_mappings")
        if mappings is None:
            fragments.append({})
            continue
        if not isinstance(mappings, (list, tuple)):
            result.unmapped.append(
                f"group {group_index}: {rank_file(result, rank)}: param_slice_mappings is a "
                f"{type(mappings).__name__}, not a list; not mapped"
            )
            return None
        mapping = mappings[group_index] if group_index < len(mappings) else {}
        if not isinstance(mapping, Mapping):
            result.unmapped.append(
                f"group {group_index}: {rank_file(result, rank)}: param_slice_mappings holds a "
                f"{type(mapping).__name__}, not parameter names and fragments; not mapped"
            )
            return None
        fragments.append(mapping)
    return fragments


def checked_fragments(
    result: ZeroState,
    flats: list[dict[str, Any]],
    fragments: list[Mapping[str, Any]],
    group_index: int,
) -> list[dict[str, tuple[int, int]]] | None:
    """The fragments as (start, numel) by name, when every one is whole numbers inside its
    rank's partition and no two of one rank overlap; else None, with the reason noted. (Checked
    before anything is cut: overlapping fragments would copy the same values once per name.)"""
    checked: list[dict[str, tuple[int, int]]] = []
    for rank, (mapping, flat) in enumerate(zip(fragments, flats, strict=True)):
        size = int(flat["fp32"].numel())
        spans: dict[str, tuple[int, int]] = {}
        for name, address in mapping.items():
            span = _span(address)
            shown = shown_name(name)
            if span is None:
                problem = f"the fragment of {shown} is not a (start, numel) of whole numbers"
            elif span[0] < 0 or span[1] < 0 or span[0] + span[1] > size:
                problem = (
                    f"the fragment of {shown} (start {span[0]}, {span[1]} values) lies outside "
                    f"its {size}-value partition"
                )
            else:
                if isinstance(name, str):
                    spans[name] = span
                continue
            result.unmapped.append(
                f"group {group_index}: {rank_file(result, rank)}: {problem}; not mapped"
            )
            return None
        ordered = sorted(((s, n, name) for name, (s, n) in spans.items() if n), key=_start)
        for (start, numel, name), (after, _, other) in pairwise(ordered):
            if start + numel > after:
                result.unmapped.append(
                    f"group {group_index}: {rank_file(result, rank)}: the fragments of "
                    f"{shown_name(name)} and {shown_name(other)} overlap in the partition; not mapped"
                )
                return None
        checked.append(spans)
    return checked


def _start(span: tuple[int, int, str]) -> int:
    return span[0]


def _span(address: Any) -> tuple[int, int] | None:
    if not isinstance(address, FragmentAddress):
        return None
    start, numel = getattr(address, "start", None), getattr(address, "numel", None)
    return (start, numel) if is_int(start) and is_int(numel) else None


def rank_file(result: ZeroState, rank: int) -> str:
    """Rank `rank`'s file as shown (rank N where the caller named none)."""
    return result.sources[rank] if rank < len(result.sources) else f"rank {rank}"


def is_int(value: Any) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def shown_name(name: Any) -> str:
    return name[:120] if isinstance(name, str) else f"a {type(name).__name__} key"


def short_error(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return text[:160] + ("..." if len(text) > 160 else "")
