"""Per-parameter state out of flat ZeRO-1/2/3 partitions (the files are loaded by
deepspeed_pickle.py, each group's layout checked by deepspeed_zero_layout.py).

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
from typing import TYPE_CHECKING, Any

from tscope.ingest.checkpoints.deepspeed_zero_layout import (
    MOMENT_SLOTS,
    base_state,
    checked_fragments,
    flat_groups,
    is_int,
    parse_shapes,
    short_error,
    shown_name,
    slice_mappings,
)

if TYPE_CHECKING:
    import torch


# What forged values can raise from the rebuild (a tensor where an int belongs, a list where a
# mapping does). Caught only around the rebuild of one group, as a last line of defence behind
# the explicit checks below; MemoryError and KeyboardInterrupt are never caught.
FORGED_DATA_ERRORS: tuple[type[Exception], ...] = (
    TypeError,
    ValueError,
    AttributeError,
    IndexError,
    KeyError,
    RuntimeError,
    OverflowError,
)


@dataclass
class ZeroState:
    """Per-parameter fp32 masters and Adam moments rebuilt from the rank files."""

    masters: dict[str, torch.Tensor] = field(default_factory=dict)
    moments: dict[str, dict[str, Any]] = field(default_factory=dict)
    group_of: dict[str, int] = field(default_factory=dict)
    param_groups: list[dict[str, Any]] = field(default_factory=list)
    unmapped: list[str] = field(default_factory=list)
    sources: list[str] = field(default_factory=list)  # the rank files as shown, for the notes
    loss_scaler: Any = None
    zero_stage: int | None = None


def rebuild_zero_state(
    rank_states: Sequence[Mapping[str, Any]],
    param_shapes: Sequence[Mapping[str, Any]],
    sources: Sequence[str] = (),
) -> ZeroState:
    """`rank_states[r]` is rank r's `optimizer_state_dict`; `param_shapes` from the model file;
    `sources[r]`, rank r's file as the notes name it.

    The files come from strangers: every value is checked before a tensor is cut from it, and a
    group whose layout is impossible (fragments overlapping or outside the partition, shapes
    that are not sizes) is not mapped, with the reason in `unmapped`. What is built is views of
    the partitions, or copies of disjoint parts of them: never more than the files hold.
    """
    result = ZeroState(sources=list(sources))
    first = rank_states[0]
    result.loss_scaler = first.get("loss_scaler")
    stage = first.get("zero_stage")
    result.zero_stage = int(stage) if isinstance(stage, int) else None
    base = base_state(first)
    groups = base.get("param_groups") if isinstance(base, Mapping) else None
    result.param_groups = [
        {k: v for k, v in g.items() if isinstance(k, str) and k != "params"}
        for g in (groups if isinstance(groups, list) else [])
        if isinstance(g, Mapping)
    ]
    zero3 = result.zero_stage == 3
    if zero3 and not _all_ranks_present(result, rank_states):
        return result
    for group_index, shapes in enumerate(param_shapes):
        built = ZeroState(sources=result.sources)  # merged once the whole group is rebuilt
        try:
            _rebuild_group(built, rank_states, group_index, shapes, zero3)
        except FORGED_DATA_ERRORS as error:
            result.unmapped.extend(built.unmapped)
            result.unmapped.append(
                f"group {group_index}: the partitions could not be rebuilt "
                f"({type(error).__name__}: {short_error(error)}); not mapped"
            )
            continue
        result.masters.update(built.masters)
        result.moments.update(built.moments)
        result.group_of.update(built.group_of)
        result.unmapped.extend(built.unmapped)
    return result


def _all_ranks_present(result: ZeroState, rank_states: Sequence[Mapping[str, Any]]) -> bool:
    """ZeRO-3 splits every parameter over all ranks: without every rank's file, none is whole."""
    counts = [state.get("partition_count") for state in rank_states]
    agreed = all(is_int(count) for count in counts) and len(set(counts)) == 1
    expected = counts[0] if agreed else None
    if expected != len(rank_states):
        result.unmapped.append(
            f"ZeRO-3 splits every parameter over {expected} ranks, {len(rank_states)} rank "
            "file(s) are here: no parameter can be rebuilt"
            if agreed
            else "the ZeRO-3 rank files do not record one number of ranks (partition_count): "
            "no parameter can be rebuilt"
        )
        return False
    return True


def _rebuild_group(
    result: ZeroState,
    rank_states: Sequence[Mapping[str, Any]],
    group_index: int,
    shapes: Any,
    zero3: bool = False,
) -> None:
    if not isinstance(shapes, Mapping):
        result.unmapped.append(
            f"group {group_index}: param_shapes holds a {type(shapes).__name__}, not parameter "
            "names and shapes; not mapped"
        )
        return
    parsed, bad = parse_shapes(shapes)
    if bad and (zero3 or len(bad) == len(shapes)):
        # ZeRO-3 (and the packed layout) place each parameter after the ones before it: one
        # parameter without a size leaves every later one's place unknown.
        result.unmapped.append(f"group {group_index}: {bad[0]}; not mapped")
        return
    flats = flat_groups(result, rank_states, group_index, zero3)
    if flats is None:
        return
    fragments: list[dict[str, tuple[int, int]]] | None  # per rank: name -> (start, numel)
    if zero3:
        fragments = _zero3_fragments(result, flats, parsed, group_index)
    else:
        mappings = slice_mappings(result, rank_states, group_index)
        if mappings is None:
            return
        if any(mappings):
            fragments = checked_fragments(result, flats, mappings, group_index)
        elif bad:  # packed in order: a parameter without a size leaves the later ones unplaced
            result.unmapped.append(f"group {group_index}: {bad[0]}; not mapped")
            return
        else:
            fragments = _fragments_from_order(result, flats, parsed, group_index, rank_states)
    if not fragments:
        return
    if bad:
        result.unmapped.append(_summary(bad, group_index) + "; not mapped")
    step = flats[0].get("step")
    short: list[str] = []
    for name, shape in parsed.items():
        numel = math.prod(shape)
        pieces = [(rank, f[name]) for rank, f in enumerate(fragments) if name in f]
        found = sum(numel_ for _, (_, numel_) in pieces)
        if found != numel:
            short.append(f"{shown_name(name)}: its fragments hold {found} of {numel} values")
            continue
        result.group_of[name] = group_index
        result.masters[name] = _assemble(flats, pieces, "fp32", shape)
        entry: dict[str, Any] = {"step": step}
        for slot in MOMENT_SLOTS:
            if all(slot in flats[rank] for rank, _ in pieces):
                entry[slot] = _assemble(flats, pieces, slot, shape)
        if "exp_avg" in entry:
            result.moments[name] = entry
    if short:
        result.unmapped.append(_summary(short, group_index))


def _summary(problems: list[str], group_index: int) -> str:
    """One note for many parameters with the same kind of problem: the first, and how many."""
    more = f" (and {len(problems) - 1} more parameter(s) alike)" if len(problems) > 1 else ""
    return f"{problems[0]} (group {group_index}){more}"


def _assemble(
    flats: list[dict[str, Any]],
    pieces: list[tuple[int, tuple[int, int]]],
    slot: str,
    shape: tuple[int, ...],
) -> torch.Tensor:
    """A parameter out of its checked fragments: a view when it lies in one partition, else a
    copy of the fragments (disjoint, so all copies together are at most the partitions)."""
    import torch

    parts = [flats[rank][slot].narrow(0, start, numel) for rank, (start, numel) in pieces]
    if not parts:  # a parameter of no values
        return torch.zeros(shape, dtype=flats[0]["fp32"].dtype)
    flat = parts[0] if len(parts) == 1 else torch.cat(parts)  # one fragment: a view, no copy
    return flat.view(shape)


def _fragments_from_order(
    result: ZeroState,
    flats: list[dict[str, Any]],
    shapes: Mapping[str, tuple[int, ...]],
    group_index: int,
    rank_states: Sequence[Mapping[str, Any]],
) -> list[dict[str, tuple[int, int]]]:
    """Older DeepSpeed without param_slice_mappings: one rank, parameters packed in order."""
    if len(flats) != 1:
        result.unmapped.append(
            f"group {group_index}: no param_slice_mappings and {len(flats)} ranks; where each "
            "rank's partition starts inside a parameter is not recorded"
        )
        return []
    paddings = rank_states[0].get("group_paddings")
    padding: Any = 0
    if paddings is not None:
        listed = isinstance(paddings, (list, tuple)) and group_index < len(paddings)
        padding = paddings[group_index] if listed else None
    if not is_int(padding) or padding < 0:
        result.unmapped.append(
            f"group {group_index}: group_paddings records no padding for the group; not mapped"
        )
        return []
    total = sum(math.prod(shape) for shape in shapes.values())
    stored = int(flats[0]["fp32"].numel())
    if total + padding != stored:
        result.unmapped.append(
            f"group {group_index}: parameters hold {total} values plus {padding} padding, "
            f"the partition {stored}; not mapped"
        )
        return []
    start, out = 0, {}
    for name, shape in shapes.items():
        numel = math.prod(shape)
        out[name] = (start, numel)
        start += numel
    return [out]


def _zero3_fragments(
    result: ZeroState,
    flats: list[dict[str, Any]],
    shapes: Mapping[str, tuple[int, ...]],
    group_index: int,
) -> list[dict[str, tuple[int, int]]]:
    """Where each parameter sits in each rank's ZeRO-3 flat group: every parameter is split into
    ranks equal slices of ceil(numel / ranks) values (the last ones padded), and a rank's flat
    group is its slices in `param_shapes` order, each at the same offset on every rank."""
    ranks = len(flats)
    slices: list[dict[str, tuple[int, int]]] = [{} for _ in range(ranks)]
    offset = 0
    for name, shape in shapes.items():
        numel = math.prod(shape)
        part = -(-numel // ranks)
        for rank in range(ranks):
            held = min(part, numel - rank * part)
            if held > 0:
                slices[rank][name] = (offset, held)
        offset += part
    stored = {int(flat["fp32"].numel()) for flat in flats}
    if len(stored) != 1 or offset > stored.pop():
        result.unmapped.append(
            f"group {group_index}: the parameters' ZeRO-3 slices need {offset} values per rank, "
            "the ranks' flat groups hold a different number; not mapped"
        )
        return []
    return slices
