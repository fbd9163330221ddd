"""The optimizer state of a DCP checkpoint, mapped to parameter names from its flattened keys.

dcp_layout sorts the keys (`optim.state.<fqn>.exp_avg`, `optimizer.param_groups.<i>.lr`, ...);
this module turns the Adam moments and the param groups it found into an `OptimizerState`: each
parameter's moments are read from the shards only when asked for (`_LazyMoments`), its step
counter and the groups' hyper-parameters up front. Kept apart from dcp.py, which opens the
folders and answers for the checkpoint (weights, step, resume audit): this is the mapping of one
producer's optimizer keys to the model's names, and nothing here opens a folder.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any, cast

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints import dcp_storage
from tscope.ingest.checkpoints.base import LoadOptions, OptimizerState
from tscope.ingest.checkpoints.dcp_layout import HYPER_KEYS, DcpFolder, Where
from tscope.ingest.checkpoints.state_dict_files import normalize_name
from tscope.model import PartialInput
from tscope.model.plain_digits import is_plain_digits


def read_optimizer_state(
    model: Mapping[str, Where],
    moments: Mapping[str, Mapping[str, Where]],
    groups: list[tuple[DcpFolder, str, str]],
    options: LoadOptions,
    partial: list[PartialInput],
) -> OptimizerState:
    """Per-parameter moments (lazy) and param groups; read failures go to `partial`."""
    state = OptimizerState()
    for name, slots in sorted(moments.items()):
        model_entry = model.get(name)
        moment = slots.get("exp_avg")
        if model_entry is not None and moment is not None:
            shape = _stored_shape(*model_entry)
            if _stored_shape(*moment) != shape:
                state.unmapped.append(
                    f"{name}: exp_avg has shape {list(_stored_shape(*moment))}, the "
                    f"parameter has {list(shape)}"
                )
                continue
        # Lazy: each moment is read from the shards when asked for, so the whole optimizer
        # never sits in memory (DCP records cannot be memory-mapped). Consumers only read.
        step = _step_counter(slots.get("step"), partial)
        state.per_param[name] = cast(dict[str, Any], _LazyMoments(slots, step, partial))
    _read_groups(state, groups, options, partial)
    return state


def _step_counter(where: tuple[DcpFolder, str] | None, partial: list[PartialInput]) -> float | None:
    if where is None:
        return None
    folder, key = where
    try:
        return float(dcp_storage.load_tensor(folder.path, folder.metadata, key, folder.shown))
    except UnreadableInput as error:
        _note_once(partial, PartialInput(error.path, error.problem_text))
        return None


def _read_groups(
    state: OptimizerState,
    groups: list[tuple[DcpFolder, str, str]],
    options: LoadOptions,
    partial: list[PartialInput],
) -> None:
    """Group hyper-parameters: `param_groups.<i>.<key>` (+ `.params` FQNs) or, flattened,
    `param_groups.<fqn>.<key>` (one set per parameter; equal sets are merged)."""
    for folder, _prefix, groups_prefix in groups:
        keys = [k for k in folder.bytes_keys + folder.tensor_keys if k.startswith(groups_prefix)]
        by_owner: dict[str, dict[str, Any]] = {}
        for key in keys:
            owner, _, hyper = key[len(groups_prefix) :].rpartition(".")
            if hyper in (*HYPER_KEYS, "params"):
                by_owner.setdefault(owner, {})[hyper] = key
        indexed = all(is_plain_digits(owner) for owner in by_owner)
        for owner in sorted(
            by_owner, key=lambda o: (not is_plain_digits(o), int(o) if is_plain_digits(o) else 0, o)
        ):
            values = {
                hyper: _hyper(folder, key, options, partial)
                for hyper, key in by_owner[owner].items()
                if hyper != "params"
            }
            if indexed:
                index = len(state.param_groups)
                state.param_groups.append(values)
                members = _hyper(folder, by_owner[owner].get("params", ""), options, partial)
                for fqn in members if isinstance(members, list) else []:
                    state.group_of[normalize_name(str(fqn))] = index
            else:
                if values not in state.param_groups:
                    state.param_groups.append(values)
                state.group_of[normalize_name(owner)] = state.param_groups.index(values)


def _hyper(folder: DcpFolder, key: str, options: LoadOptions, partial: list[PartialInput]) -> Any:
    if not key:
        return None
    try:
        if key in folder.tensor_keys:
            value: Any = dcp_storage.load_tensor(folder.path, folder.metadata, key, folder.shown)
            return float(value) if value.numel() == 1 else value
        return dcp_storage.load_bytes_item(folder.path, folder.metadata, key, folder.shown, options)
    except UnreadableInput as error:
        _note_once(partial, PartialInput(error.path, error.problem_text))
        return None


class _LazyMoments(Mapping[str, Any]):
    """{"exp_avg", "exp_avg_sq", "step"} of one parameter; moments read from the shards on access.

    Reads happen inside the consumer's statistics code, which expects plain values: a shard that
    cannot be read gives None (the moment is absent) and one line in the handle's `partial`.
    The step counter is a scalar and is read up front.
    """

    def __init__(
        self,
        slots: Mapping[str, tuple[DcpFolder, str]],
        step: float | None,
        partial: list[PartialInput],
    ) -> None:
        self._slots: dict[str, tuple[DcpFolder, str] | None] = {
            slot: where for slot, where in slots.items() if slot != "step"
        }
        self._step = step
        self._partial = partial

    def __getitem__(self, slot: str) -> Any:
        if slot == "step":
            return self._step
        where = self._slots[slot]
        if where is None:
            return None
        folder, key = where
        try:
            return dcp_storage.load_tensor(folder.path, folder.metadata, key, folder.shown)
        except UnreadableInput as error:
            _note_once(self._partial, PartialInput(error.path, error.problem_text))
            return None

    def __iter__(self) -> Iterator[str]:
        return iter([*self._slots, "step"])

    def __len__(self) -> int:
        return len(self._slots) + 1


def _note_once(partial: list[PartialInput], entry: PartialInput) -> None:
    if entry not in partial:
        partial.append(entry)


def _stored_shape(folder: DcpFolder, key: str) -> tuple[int, ...]:
    return folder.metadata.tensors[key].size
