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
    notes = _Notes(partial)
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
        step = _step_counter(slots.get("step"), notes)
        state.per_param[name] = cast(dict[str, Any], _LazyMoments(slots, step, notes))
    _read_groups(state, groups, options, notes)
    return state


def _step_counter(where: tuple[DcpFolder, str] | None, notes: _Notes) -> float | None:
    if where is None:
        return None
    folder, key = where
    try:
        return float(dcp_storage.load_tensor(folder.path, folder.metadata, key, folder.shown))
    except UnreadableInput as error:
        notes.add(PartialInput(error.path, error.problem_text))
        return None


def _read_groups(
    state: OptimizerState,
    groups: list[tuple[DcpFolder, str, str]],
    options: LoadOptions,
    notes: _Notes,
) -> None:
    """Group hyper-parameters: `param_groups.<i>.<key>` (+ `.params` FQNs) or, flattened,
    `param_groups.<fqn>.<key>` (one set per parameter; equal sets are merged)."""
    merged: dict[str, int] = {}
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
                hyper: _setting(_hyper(folder, key, options, notes), key, folder.shown, notes)
                for hyper, key in by_owner[owner].items()
                if hyper != "params"
            }
            if indexed:
                index = len(state.param_groups)
                state.param_groups.append(values)
                members = _hyper(folder, by_owner[owner].get("params", ""), options, notes)
                for fqn in members if isinstance(members, list) else []:
                    state.group_of[normalize_name(str(fqn))] = index
            else:
                # Settings are plain numbers and strings (`_setting`): hashable, compared as
                # they print (a NaN setting equals itself), each distinct set indexed once.
                signature = repr(sorted(values.items()))
                if signature not in merged:
                    merged[signature] = len(state.param_groups)
                    state.param_groups.append(values)
                state.group_of[normalize_name(owner)] = merged[signature]


def _hyper(folder: DcpFolder, key: str, options: LoadOptions, notes: _Notes) -> Any:
    if not key:
        return None
    try:
        if key in folder.tensor_keys:
            value: Any = dcp_storage.load_tensor(folder.path, folder.metadata, key, folder.shown)
            return float(value) if value.numel() == 1 else value
        limit = (
            dcp_storage.MAX_BYTES_ITEM if key.endswith(".params") else dcp_storage.MAX_SETTING_ITEM
        )
        return dcp_storage.load_bytes_item(
            folder.path, folder.metadata, key, folder.shown, options, limit
        )
    except UnreadableInput as error:
        notes.add(PartialInput(error.path, error.problem_text))
        return None


# A group setting is a number (lr, eps, weight_decay), a pair (betas) or a short string; a
# setting holding more is not one (a crafted group's 1M-element list, loaded once per group).
MAX_SETTING_ELEMENTS = 8
MAX_SETTING_CHARS = 200


def _setting(value: Any, key: str, shown: str, notes: _Notes) -> Any:
    """A group setting as a plain value: a number, a bool, a short string, a tuple of at most
    MAX_SETTING_ELEMENTS numbers, or None (with a note) for anything else. torch's own DCP save
    of a tensor-valued setting (an lr tensor of two elements) once ended in a traceback."""
    import torch

    if isinstance(value, torch.Tensor):
        if value.numel() > MAX_SETTING_ELEMENTS or value.is_complex():
            value = None
        elif value.numel() == 1:
            return float(value)
        else:
            value = tuple(float(x) for x in value.detach().double().flatten().tolist())
    elif isinstance(value, (list, tuple)):
        numbers = len(value) <= MAX_SETTING_ELEMENTS and all(
            isinstance(x, (int, float)) for x in value
        )
        value = tuple(float(x) for x in value) if numbers else None
    elif isinstance(value, str):
        value = value if len(value) <= MAX_SETTING_CHARS else None
    elif value is not None and not isinstance(value, (bool, int, float)):
        value = None
    else:
        return value
    if value is None:
        notes.add(PartialInput(shown, f"param group setting {key[:120]} is not a plain value"))
    return value


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
        notes: _Notes,
    ) -> None:
        self._slots: dict[str, tuple[DcpFolder, str] | None] = {
            slot: where for slot, where in slots.items() if slot != "step"
        }
        self._step = step
        self._notes = notes

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
            self._notes.add(PartialInput(error.path, error.problem_text))
            return None

    def __iter__(self) -> Iterator[str]:
        return iter([*self._slots, "step"])

    def __len__(self) -> int:
        return len(self._slots) + 1


class _Notes:
    """The handle's partial list, each problem once: a set beside it, as a crafted .metadata's
    32,000 failing entries made the list's own membership test quadratic (78 s, red team round
    8; evidence.py shows the first ones of a file and counts the rest)."""

    def __init__(self, partial: list[PartialInput]) -> None:
        self.partial = partial
        self._seen: set[PartialInput] = set(partial)

    def add(self, entry: PartialInput) -> None:
        if entry not in self._seen:
            self._seen.add(entry)
            self.partial.append(entry)


def _stored_shape(folder: DcpFolder, key: str) -> tuple[int, ...]:
    return folder.metadata.tensors[key].size
