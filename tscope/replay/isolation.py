"""Keep the per-sample gradient passes out of the replay's way: observers' hooks and the RNG.

Observers register module hooks for the step (on_step_start .. on_step_end); the extra forwards
of the per-sample gradients must not feed their statistics, nor call hooks that vmap cannot run.
The hooks present at the step's start (the model's own) stay; later ones are suspended and put
back in their order (global hooks, torch.nn.modules.module.register_module_forward_hook, are
not touched). RNG snapshots taken before each micro-batch's forward let the batch
Jacobian draw the dropout masks the step drew.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch

# Module hook tables: hooks that observers add for the step are suspended during the extra
# forwards here, so their statistics see the training step only.
HOOK_TABLES = ("_forward_hooks", "_forward_pre_hooks", "_backward_hooks", "_backward_pre_hooks")

HookSnapshot = dict[int, dict[str, frozenset[int]]]  # id(module) -> table -> hook ids
# True during the extra passes: observers that measure through something other than module hooks
# (the attention observer wraps transformers' attention functions) check it and stay silent.
_EXTRA_PASSES: ContextVar[bool] = ContextVar("tscope_extra_passes", default=False)


def in_extra_pass() -> bool:
    """True while per-sample gradient passes run: not the training step, do not measure."""
    return _EXTRA_PASSES.get()


def hook_snapshot(model: torch.nn.Module) -> HookSnapshot:
    """The module hooks present now: those added later (by observers) are suspended here."""
    return {
        id(module): {name: frozenset(getattr(module, name, {})) for name in HOOK_TABLES}
        for module in model.modules()
    }


@contextmanager
def hooks_suspended(model: torch.nn.Module, before: HookSnapshot | None) -> Iterator[None]:
    saved = []
    if before is not None:
        for module in model.modules():
            known = before.get(id(module), {})
            for name in HOOK_TABLES:
                table = getattr(module, name, None)
                if not table or all(key in known.get(name, ()) for key in table):
                    continue
                saved.append((table, list(table.items())))
                for key in [k for k in table if k not in known.get(name, ())]:
                    del table[key]
    token = _EXTRA_PASSES.set(True)
    try:
        yield
    finally:
        _EXTRA_PASSES.reset(token)
        for table, items in saved:  # the same hooks, in their order
            table.clear()
            table.update(items)


def rng_snapshot(device: torch.device) -> Any:
    import torch

    cuda = torch.cuda.get_rng_state(device) if device.type == "cuda" else None
    return torch.get_rng_state(), cuda, device


def set_rng(state: Any) -> None:
    import torch

    cpu, cuda, device = state
    torch.set_rng_state(cpu)
    if cuda is not None:
        torch.cuda.set_rng_state(cuda, device)
