"""The user's replay entry file (CONTRACT.md "The replay entry file"): load it, expose its hooks.

The file is executed: the user passed it explicitly, as they would run their training script.

Required:  `batches(start_step) -> Iterable` — the batches of optimizer steps start_step+1, ...
           (one item per step; a list of micro-batches under gradient accumulation).
Optional:  `build_model(config: dict | None) -> nn.Module`
           `loss_fn(model, batch[, num_items_in_batch=..., num_samples=...]) -> Tensor[batch]`
           `build_optimizer(model) -> torch.optim.Optimizer`
           `learning_rate(step) -> float`  group 0's learning rate of a step, when the logs lack it
           `batch_index(step) -> int`  the training loop's batch index of a step's (first) batch,
                                       for skip_batches.json (default: step − 1, one epoch)
           `steps_per_epoch: int`  Trainer runs with dropout: the DataLoader draws once from the
                                   global torch RNG at each epoch start, and the replay mirrors it
           `max_grad_norm: float`  overrides the clipping threshold read from the checkpoint
           `trainer_counts_shifted_labels: bool`  overrides the Trainer token-count convention
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from tscope.errors import UsageError

if TYPE_CHECKING:
    import torch

_LOADS = itertools.count(1)
# Keyword extras a loss_fn may declare; each is passed only when its signature accepts it.
LOSS_KEYWORDS = ("num_items_in_batch", "num_samples")


@dataclass(frozen=True)
class Entry:
    path: str  # as the user gave it, for messages
    batches: Callable[[int], Iterable[Any]]
    build_model: Callable[[dict[str, Any] | None], Any] | None = None
    loss_fn: Callable[..., Any] | None = None
    build_optimizer: Callable[[Any], Any] | None = None
    learning_rate: Callable[[int], float] | None = None
    batch_index: Callable[[int], int] | None = None
    steps_per_epoch: int | None = None
    max_grad_norm: float | None = None
    trainer_counts_shifted_labels: bool | None = None
    loss_keywords: tuple[str, ...] = ()  # the LOSS_KEYWORDS loss_fn accepts

    def per_sample_loss(
        self, model: Any, batch: Any, num_items_in_batch: Any, num_samples: int
    ) -> torch.Tensor:
        """loss_fn's per-sample losses, shape (rows,), checked; extras only if it takes them."""
        assert self.loss_fn is not None
        offered = {"num_items_in_batch": num_items_in_batch, "num_samples": num_samples}
        extras = {key: offered[key] for key in self.loss_keywords}
        losses = self.loss_fn(model, batch, **extras)
        if not hasattr(losses, "dim") or losses.dim() != 1:
            shape = tuple(losses.shape) if hasattr(losses, "shape") else type(losses).__name__
            raise UsageError(
                f"{self.path}: loss_fn returned {shape}; it must return per-sample losses of "
                "shape [batch] whose mean is the training loss."
            )
        result: torch.Tensor = losses
        return result


def load_entry(path: str | Path) -> Entry:
    """Import the entry file; a missing or broken file, or one without batches(), is one line."""
    shown = str(path)
    module = import_entry_module(path)
    batches = getattr(module, "batches", None)
    if not callable(batches):
        raise UsageError(
            f"Entry file {shown} defines no batches(start_step) function; it must yield the "
            "batches of optimizer steps start_step+1, start_step+2, ..."
        )
    loss_fn = _optional_callable(module, "loss_fn", shown)
    return Entry(
        path=shown,
        batches=batches,
        build_model=_optional_callable(module, "build_model", shown),
        loss_fn=loss_fn,
        build_optimizer=_optional_callable(module, "build_optimizer", shown),
        learning_rate=_optional_callable(module, "learning_rate", shown),
        batch_index=_optional_callable(module, "batch_index", shown),
        steps_per_epoch=_optional_number(module, "steps_per_epoch", shown, int),
        max_grad_norm=_optional_number(module, "max_grad_norm", shown, float),
        trainer_counts_shifted_labels=_optional_bool(
            module, "trainer_counts_shifted_labels", shown
        ),
        loss_keywords=_accepted_keywords(loss_fn) if loss_fn is not None else (),
    )


def import_entry_module(path: str | Path) -> ModuleType:
    """Import a user's entry file (replay's or xray's) as a fresh private module; a missing or
    broken file is one explained line."""
    file = Path(path)
    shown = str(path)
    if not file.is_file():
        raise UsageError(f"Entry file {shown} does not exist. Pass a Python file with --entry.")
    return _import(file, shown)


def _import(file: Path, shown: str) -> ModuleType:
    # A fresh, private module name: loading a second entry (or the same one again, with other
    # environment variables) never reuses an earlier module object.
    name = f"tscope_replay_entry_{next(_LOADS)}"
    spec = importlib.util.spec_from_file_location(name, file)
    if spec is None or spec.loader is None:
        raise UsageError(f"Entry file {shown} cannot be imported: it is not a Python file.")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses and pickling in the entry look their module up here
    # No __pycache__ next to the entry file (or its imports): it may sit inside the run dir,
    # and tscope writes nothing under its inputs.
    writes_bytecode = sys.dont_write_bytecode
    sys.dont_write_bytecode = True
    try:
        spec.loader.exec_module(module)
    except Exception as error:  # the user's code: every failure becomes one explained line
        sys.modules.pop(name, None)
        detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise UsageError(
            f"Entry file {shown} failed to import: {type(error).__name__}"
            + (f": {detail[:200]}" if detail else "")
            + ". Fix the file (python "
            + shown
            + " shows the traceback)."
        ) from error
    finally:
        sys.dont_write_bytecode = writes_bytecode
    return module


def _optional_callable(module: ModuleType, name: str, shown: str) -> Callable[..., Any] | None:
    value = getattr(module, name, None)
    if value is not None and not callable(value):
        raise UsageError(f"Entry file {shown}: {name} must be a function.")
    return value


def _optional_number(
    module: ModuleType, name: str, shown: str, kind: type[int] | type[float]
) -> Any:
    value = getattr(module, name, None)
    if callable(value):
        value = value()
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise UsageError(f"Entry file {shown}: {name} must be a number, got {value!r}.")
    return kind(value)


def _optional_bool(module: ModuleType, name: str, shown: str) -> bool | None:
    value = getattr(module, name, None)
    if value is not None and not isinstance(value, bool):
        raise UsageError(f"Entry file {shown}: {name} must be True or False, got {value!r}.")
    return value


def _accepted_keywords(function: Callable[..., Any]) -> tuple[str, ...]:
    try:
        parameters = inspect.signature(function).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: pass nothing extra
        return ()
    if any(p.kind == inspect.Parameter.VAR_KEYWORD for p in parameters):
        return LOSS_KEYWORDS
    names = {p.name for p in parameters if p.kind != inspect.Parameter.VAR_POSITIONAL}
    return tuple(key for key in LOSS_KEYWORDS if key in names)
