"""What a raw optimizer state_dict holds for a resume, per param group, named or not.

Kept apart from optimizer_mapping.py, which names the state's entries: this only checks that
each optimizer family's per-parameter state and step counters are there.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tscope.ingest.checkpoints.optimizer_mapping import is_param_id
from tscope.ingest.checkpoints.step_numbers import step_value


@dataclass(frozen=True)
class OptimizerSummary:
    """What the raw state holds, per param group, whether or not it could be named."""

    has_moments: bool  # every state entry holds per-coordinate moments (exp_avg, ...)
    has_step_counters: bool  # every state entry holds its step counter
    notes: tuple[str, ...]


def summarize_optimizer(raw: Any) -> OptimizerSummary:
    if not isinstance(raw, Mapping) or not isinstance(raw.get("state"), Mapping):
        return OptimizerSummary(False, False, ("the optimizer file holds no per-parameter state",))
    state: Mapping[Any, Any] = raw["state"]
    groups: list[Any] = raw["param_groups"] if isinstance(raw.get("param_groups"), list) else []
    notes = []
    for index, group in enumerate(groups):
        if not isinstance(group, Mapping):
            notes.append(
                f"optimizer group {index} is a {type(group).__name__}, not a group: ignored"
            )
            continue
        ids = group.get("params")
        ids = [i for i in ids if is_param_id(i)] if isinstance(ids, list | tuple) else []
        entries = [state[i] for i in ids if i in state and isinstance(state[i], Mapping)]
        with_moments = sum(1 for e in entries if _holds_moments(e))
        counters = (step_value(e.get("step")) for e in entries)
        steps = sorted({float(c) for c in counters if c is not None})
        counted = (
            "no step counters"
            if not steps
            else f"step {steps[0]:g}"
            if len(steps) == 1
            else f"steps {steps[0]:g}-{steps[-1]:g}"
        )
        hyper = {k: group.get(k) for k in ("lr", "weight_decay") if k in group}
        shown = ", ".join(f"{k}={_short(v)}" for k, v in hyper.items())
        notes.append(
            f"optimizer group {index} ({shown}): moments for {with_moments} of {len(ids)} "
            f"parameters, {counted}"
        )
    entries = [e for e in state.values() if isinstance(e, Mapping)]
    stateless = _keeps_no_state(groups)
    if not entries and not stateless:
        notes.append("the optimizer state is empty: saved before the first step, or reset")
    if stateless:
        notes.append("plain SGD (momentum 0) keeps no per-parameter state: nothing to restore")
    # SGD keeps no step counter (only a momentum buffer), and neither do optimizers outside
    # torch that need none: Lion keeps only exp_avg (a blind set's correctly resumed Lion run,
    # hR run06, session 31, warned "optimizer step counters missing"). The counter is needed
    # where the state keeps it or where Adam-style bias correction reads it (exp_avg_sq).
    counts_steps = not _is_sgd(groups) and any(
        e.get("step") is not None or "exp_avg_sq" in e or "exp_avg_sq_row" in e for e in entries
    )
    return OptimizerSummary(
        has_moments=stateless or (bool(entries) and all(_holds_moments(e) for e in entries)),
        has_step_counters=stateless
        or (
            bool(entries) and (not counts_steps or all(e.get("step") is not None for e in entries))
        ),
        notes=tuple(notes),
    )


def _holds_moments(entry: Mapping[Any, Any]) -> bool:
    """Whether a parameter's state holds per-coordinate statistics, whatever the optimizer names
    them: Adam's exp_avg/exp_avg_sq, SGD's momentum_buffer, RMSprop's square_avg, Adagrad's sum,
    Adafactor's factored exp_avg_sq_row/exp_avg_sq_col (a 2-D weight keeps no full-shape moment;
    a healthy resumed Adafactor run read as "moments missing" before this)."""
    return any(key != "step" and getattr(value, "ndim", 0) >= 1 for key, value in entry.items())


def _is_sgd(groups: list[Any]) -> bool:
    """torch.optim.SGD's param groups: momentum, dampening and nesterov, no betas."""
    return bool(groups) and all(
        isinstance(g, Mapping)
        and {"momentum", "dampening", "nesterov"} <= g.keys()
        and "betas" not in g
        for g in groups
    )


def _keeps_no_state(groups: list[Any]) -> bool:
    """SGD without momentum: it stores nothing per parameter, so an empty state is complete."""
    return _is_sgd(groups) and all(not g.get("momentum") for g in groups)


def _short(value: Any) -> str:
    try:
        return f"{float(value):.3g}"
    except (TypeError, ValueError, RuntimeError, OverflowError):  # text, a 2-value tensor, 10**400
        return str(value)[:40]
