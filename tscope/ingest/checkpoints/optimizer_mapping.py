"""Give torch optimizer state (integer ids) the names of the parameters it belongs to.

`Optimizer.state_dict()` numbers parameters 0, 1, 2, ... across its param groups in group order
(torch optim/optimizer.py `pack_group`). To name them we need the producer's grouping rule and the
`named_parameters()` order; a checkpoint only holds names and shapes. So we try the rule on
candidate orders and accept a mapping only when every group has the right size and every moment
has its parameter's shape. Same-shape permutations cannot be told apart by shapes; the candidate's
order decides them. When no candidate fits, the state is reported unmapped with the reason.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tscope.ingest.checkpoints.base import OptimizerState
from tscope.ingest.checkpoints.param_order import ParamSpec
from tscope.ingest.checkpoints.step_numbers import step_value

# A grouping rule: parameters in named_parameters() order -> the names of each param group.
GroupingRule = Callable[[Sequence[ParamSpec]], list[list[str]]]

# transformers Trainer.get_decay_parameter_names (trainer.py:1408-1417, v5.24), searched in the
# lower-cased full name: these parameters go to the no-decay group.
TRAINER_NO_DECAY_PATTERN = re.compile(r"bias|layernorm|rmsnorm|(?:^|\.)norm(?:$|\.)|_norm(?:$|\.)")
# The Trainer also excludes every parameter of an nn.LayerNorm module, whatever its name (GPT-2's
# ln_1, ln_2, ln_f). Without the model we infer those modules from the name: ln, ln_1, ln_f, ln1,
# emb_ln, ... holding a 1-D weight.
_LAYERNORM_MODULE_NAME = re.compile(r"^ln(?:_?[a-z0-9]+)?$|_ln$")


def trainer_groups(params: Sequence[ParamSpec]) -> list[list[str]]:
    """Trainer.create_optimizer: group 0 decays, group 1 (biases, norms) does not."""
    layernorm_modules = {
        module
        for module, leaf, spec in _split(params)
        if leaf == "weight"
        and len(spec.shape) == 1
        and _LAYERNORM_MODULE_NAME.search(module.rsplit(".", 1)[-1].lower())
    }
    decay: list[str] = []
    no_decay: list[str] = []
    for module, _, spec in _split(params):
        excluded = module in layernorm_modules or TRAINER_NO_DECAY_PATTERN.search(spec.name.lower())
        (no_decay if excluded else decay).append(spec.name)
    return [decay, no_decay]


def trainer_groups_by_name_only(params: Sequence[ParamSpec]) -> list[list[str]]:
    """The Trainer rule when no module was an nn.LayerNorm (norms named only by the patterns)."""
    decayed = [not TRAINER_NO_DECAY_PATTERN.search(p.name.lower()) for p in params]
    return [
        [p.name for p, decays in zip(params, decayed, strict=True) if decays],
        [p.name for p, decays in zip(params, decayed, strict=True) if not decays],
    ]


def nanogpt_groups(params: Sequence[ParamSpec]) -> list[list[str]]:
    """nanoGPT configure_optimizers (model.py:263-284): dim >= 2 decays, dim < 2 does not."""
    return [
        [p.name for p in params if len(p.shape) >= 2],
        [p.name for p in params if len(p.shape) < 2],
    ]


def single_group(params: Sequence[ParamSpec]) -> list[list[str]]:
    """`Optimizer(model.parameters())`: one group in named_parameters() order."""
    return [[p.name for p in params]]


# transformers' examples/pytorch/*_no_trainer.py and accelerate's examples build the groups
# themselves: `no_decay = ["bias", "layer_norm.weight"]` (older ones "LayerNorm.weight"), matched
# as case-sensitive substrings of the name, so GPT-2's ln_1.weight and Llama's
# input_layernorm.weight decay there, unlike in the Trainer.
# Per-coordinate optimizer state whose shape is the parameter's, in the order it is checked.
MOMENT_KEYS = ("exp_avg", "momentum_buffer", "exp_avg_sq", "square_avg")
# Malformed state entries named one by one; past this, counted (a crafted file can hold millions).
MALFORMED_NOTES = 5
_NO_TRAINER_NO_DECAY = ("bias", "layer_norm.weight", "LayerNorm.weight")


def no_trainer_groups(params: Sequence[ParamSpec]) -> list[list[str]]:
    """The no_trainer examples' groups: decay, then bias and LayerNorm weights."""
    excluded = [any(part in p.name for part in _NO_TRAINER_NO_DECAY) for p in params]
    return [
        [p.name for p, out in zip(params, excluded, strict=True) if not out],
        [p.name for p, out in zip(params, excluded, strict=True) if out],
    ]


TRAINER_RULES: tuple[tuple[str, GroupingRule], ...] = (
    ("Trainer decay/no-decay groups", trainer_groups),
    ("Trainer decay/no-decay groups (norms by name only)", trainer_groups_by_name_only),
    ("one param group", single_group),
)
# An accelerate loop is the user's own: the Trainer's rules, then the examples' hand-made groups.
ACCELERATE_RULES: tuple[tuple[str, GroupingRule], ...] = (
    *TRAINER_RULES,
    ("no_trainer examples' decay/no-decay groups", no_trainer_groups),
)
NANOGPT_RULES: tuple[tuple[str, GroupingRule], ...] = (
    ("nanoGPT dim>=2 / dim<2 groups", nanogpt_groups),
    ("one param group", single_group),
)
ANY_PRODUCER_RULES: tuple[tuple[str, GroupingRule], ...] = (
    ("Trainer decay/no-decay groups", trainer_groups),
    ("nanoGPT dim>=2 / dim<2 groups", nanogpt_groups),
    ("one param group", single_group),
)


def _split(params: Sequence[ParamSpec]) -> list[tuple[str, str, ParamSpec]]:
    out = []
    for spec in params:
        module, _, leaf = spec.name.rpartition(".")
        out.append((module, leaf, spec))
    return out


def map_optimizer_state(
    raw: Any,
    orders: Sequence[tuple[str, Sequence[ParamSpec]]],
    rules: Sequence[tuple[str, GroupingRule]],
) -> tuple[OptimizerState, str]:
    """Name the entries of an `Optimizer.state_dict()`.

    `orders` are candidate named_parameters() orders (most trusted first), `rules` candidate
    grouping rules. Returns the state and one line saying how the names were found.
    """
    if not isinstance(raw, Mapping) or not isinstance(raw.get("state"), Mapping):
        return OptimizerState(unmapped=["optimizer file holds no `state` mapping"]), "not mapped"
    groups = raw.get("param_groups")
    if not isinstance(groups, list) or not all(
        isinstance(g, Mapping) and isinstance(g.get("params"), list) for g in groups
    ):
        return OptimizerState(unmapped=["optimizer file holds no `param_groups`"]), "not mapped"
    if not all(is_param_id(p) for g in groups for p in g["params"]):
        unmapped = ["its `param_groups` list ids that are neither parameter numbers nor names"]
        return OptimizerState(unmapped=unmapped), "not mapped"
    state: Mapping[Any, Any] = raw["state"]
    held = sum(1 for entry in state.values() if _moment_shape(entry) is not None)
    counters = [
        step_value(entry.get("step")) for entry in state.values() if isinstance(entry, Mapping)
    ]
    largest = max((float(c) for c in counters if c is not None), default=None)
    mapped, how = _map_named(state, groups, orders, rules)
    return replace(mapped, held_entries=held, largest_step=largest), how


def _map_named(
    state: Mapping[Any, Any],
    groups: list[Any],
    orders: Sequence[tuple[str, Sequence[ParamSpec]]],
    rules: Sequence[tuple[str, GroupingRule]],
) -> tuple[OptimizerState, str]:
    hyper = [_plain_group(g) for g in groups]
    known = {spec.name: spec.shape for _, order in orders for spec in order}

    named = _names_from_producer(groups)
    if named is not None:
        return _build(state, groups, hyper, named, known), "names saved by the producer"

    failures: list[str] = []
    for rule_name, rule in rules:
        for order_name, order in orders:
            id_to_name, reason = _try(rule(order), groups, state, dict(known))
            if id_to_name is not None:
                note = f"{rule_name}, parameters in {order_name}, validated by shapes"
                return _build(state, groups, hyper, id_to_name, known), note
            failures.append(f"{rule_name} on {order_name}: {reason}")
    reason = failures[0] if failures else "no parameter names to map to"
    unmapped = [f"{len(state)} optimizer state entries not mapped to names ({reason})"]
    return OptimizerState(param_groups=hyper, unmapped=unmapped), "not mapped"


def aligned_order(candidates: Sequence[ParamSpec], raw_optimizer: Any) -> list[ParamSpec] | None:
    """`candidates` less the tensors the optimizer does not hold (buffers: positional tables,
    masks), when the optimizer's ids (in module order) fit them one way only.

    named_parameters() is the state_dict order with buffers (and tied copies) left out. Matching
    the ids' moment shapes as a subsequence of `candidates` both from the left and from the right
    gives the earliest and latest fits; when they agree the fit is forced, whatever the buffers
    are called. When they differ, shapes alone cannot say which entries are buffers (None).
    """
    ids = optimizer_ids(raw_optimizer)
    if not ids or len(ids) > len(candidates):
        return None
    left = _greedy_fit([shape for _, shape in ids], [c.shape for c in candidates])
    right_reversed = _greedy_fit(
        [shape for _, shape in reversed(ids)], [c.shape for c in reversed(candidates)]
    )
    if left is None or right_reversed is None:
        return None
    right = [len(candidates) - 1 - i for i in reversed(right_reversed)]
    if left != right:
        return None
    return [candidates[i] for i in left]


def is_param_id(value: Any) -> bool:
    """torch numbers an optimizer's parameters; DCP and `param_names` use their names. Anything
    else in `params` (a list, a dict: unhashable; a float) comes from a forged file."""
    return isinstance(value, int | str) and not isinstance(value, bool)


def optimizer_ids(raw_optimizer: Any) -> list[tuple[Any, tuple[int, ...] | None]]:
    """(id, moment shape or None when the parameter has no state yet), in id order."""
    if not isinstance(raw_optimizer, Mapping):
        return []
    groups = raw_optimizer.get("param_groups")
    state = raw_optimizer.get("state")
    if not isinstance(groups, list) or not isinstance(state, Mapping):
        return []
    out: list[tuple[Any, tuple[int, ...] | None]] = []
    for group in groups:
        params = group.get("params") if isinstance(group, Mapping) else None
        for param_id in params if isinstance(params, list | tuple) else []:
            if not is_param_id(param_id):
                continue
            entry = state.get(param_id)
            moment = entry.get("exp_avg") if isinstance(entry, Mapping) else None
            stored = getattr(moment, "shape", None)
            shape = tuple(int(d) for d in stored) if stored is not None else None
            out.append((param_id, shape))
    return out


def _greedy_fit(
    wanted: list[tuple[int, ...] | None], available: list[tuple[int, ...]]
) -> list[int] | None:
    picks, position = [], 0
    for shape in wanted:
        while position < len(available) and shape is not None and available[position] != shape:
            position += 1
        if position >= len(available):
            return None
        picks.append(position)
        position += 1
    return picks


def _names_from_producer(groups: list[Any]) -> dict[Any, str] | None:
    """`param_names` (optimizer built from named_parameters()) or FQN ids (DCP) name the state."""
    if all(isinstance(p, str) for g in groups for p in g["params"]):
        return {p: p for g in groups for p in g["params"]}
    if all(
        isinstance(g.get("param_names"), list)
        and len(g["param_names"]) == len(g["params"])
        and all(isinstance(name, str) for name in g["param_names"])  # True or {}: forged
        for g in groups
    ):
        return {i: n for g in groups for i, n in zip(g["params"], g["param_names"], strict=True)}
    return None


def _try(
    names_per_group: list[list[str]],
    groups: list[Any],
    state: Mapping[Any, Any],
    shapes: dict[str, tuple[int, ...]],
) -> tuple[dict[Any, str] | None, str]:
    # Trainer always creates both groups; an optimizer may drop an empty one (custom builders).
    if len(names_per_group) != len(groups):
        names_per_group = [names for names in names_per_group if names]
    if len(names_per_group) != len(groups):
        return None, f"{len(groups)} param groups, the rule makes {len(names_per_group)}"
    id_to_name: dict[Any, str] = {}
    for index, (group, names) in enumerate(zip(groups, names_per_group, strict=True)):
        if len(group["params"]) != len(names):
            return None, (
                f"group {index} holds {len(group['params'])} parameters, the rule gives {len(names)}"
            )
        id_to_name.update(zip(group["params"], names, strict=True))
    for param_id, entry in state.items():
        name = id_to_name.get(param_id)
        if name is None:
            return None, f"state entry {param_id} is in no param group"
        moment_shape = _moment_shape(entry)
        if moment_shape is None:
            return None, f"state entry {param_id} has no per-coordinate moment to check"
        if moment_shape != shapes[name]:
            return None, (
                f"entry {param_id} has shape {list(moment_shape)}, {name} has {list(shapes[name])}"
            )
    return id_to_name, ""


def _moment_shape(entry: Any) -> tuple[int, ...] | None:
    if not isinstance(entry, Mapping):
        return None
    for key in MOMENT_KEYS:
        value: Any = entry.get(key)
        if _is_array(value):
            return tuple(int(d) for d in value.shape)
    return None


def _is_array(value: Any) -> bool:
    """A tensor (or an array) rather than a number or text that a crafted file put there."""
    return hasattr(value, "shape") and hasattr(value, "dtype") and not isinstance(value, str)


def _build(
    state: Mapping[Any, Any],
    groups: list[Any],
    hyper: list[dict[str, Any]],
    id_to_name: Mapping[Any, str],
    shapes: Mapping[str, tuple[int, ...]],
) -> OptimizerState:
    result = OptimizerState(param_groups=hyper)
    malformed = 0
    for index, group in enumerate(groups):
        for param_id in group["params"]:
            if param_id in id_to_name:
                result.group_of[id_to_name[param_id]] = index
    for param_id, entry in state.items():
        name = id_to_name.get(param_id)
        moment_shape = _moment_shape(entry)
        if name is None or not isinstance(entry, Mapping):
            result.unmapped.append(f"state entry {param_id}: in no param group")
            continue
        if name in shapes and moment_shape is not None and moment_shape != shapes[name]:
            result.unmapped.append(
                f"state entry {param_id} ({name}): shape {list(moment_shape)}, "
                f"parameter has {list(shapes[name])}"
            )
            continue
        # A stranger's entry can hold anything: only arrays are moments, and the step counter
        # must be a step ("abc", a 2-value tensor and -2^63 were tracebacks downstream).
        moments = {k: v for k, v in entry.items() if k != "step" and _is_array(v)}
        dropped = sorted(
            str(k) for k in entry if k != "step" and k in MOMENT_KEYS and k not in moments
        )
        step, counter = entry.get("step"), step_value(entry.get("step"))
        problems = [f"`{key}` is not an array" for key in dropped]
        if step is not None and counter is None:
            problems.append("its step counter is not a step")
        if problems and len(result.malformed) < MALFORMED_NOTES:
            result.malformed.append(f"optimizer state of {name}: {', '.join(problems)}; ignored")
        malformed += bool(problems)
        moments["step"] = float(counter) if counter is not None else None
        result.per_param[name] = moments
    if malformed > len(result.malformed):
        result.malformed.append(f"{malformed - len(result.malformed)} more such entries ignored")
    return result


def _plain_group(group: Mapping[str, Any]) -> dict[str, Any]:
    """Hyper-parameters without the id lists; 0-d tensors (capturable lr, betas) as floats."""
    out: dict[str, Any] = {}
    for key, value in group.items():
        if key in ("params", "param_names"):
            continue
        if hasattr(value, "numel") and value.numel() == 1:
            value = float(value)
        elif isinstance(value, tuple):
            value = tuple(float(v) if hasattr(v, "numel") and v.numel() == 1 else v for v in value)
        out[key] = value
    return out
