"""The xray entry file (CONTRACT.md "The xray entry file"), imported by replay's loader.

Required:  `train_step(model, sequences) -> None` — batches `sequences` as the user's stack does
           and runs forward and backward (may split into micro-batches).
Optional:  `intended = "token_mean" | "sequence_mean" | "sum"` (default "token_mean").
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tscope.errors import UsageError
from tscope.model.xray import INTENDED_RULES
from tscope.replay.entry import import_entry_module


@dataclass(frozen=True)
class XrayEntry:
    path: str  # as the user gave it, for messages
    train_step: Callable[[Any, list[dict[str, list[int]]]], Any]
    intended: str = "token_mean"


def load_xray_entry(path: str | Path) -> XrayEntry:
    shown = str(path)
    module = import_entry_module(path)
    train_step = getattr(module, "train_step", None)
    if not callable(train_step):
        raise UsageError(
            f"Entry file {shown} defines no train_step(model, sequences) function; it must batch "
            "the sequences as your training stack does and call .backward()."
        )
    intended = getattr(module, "intended", "token_mean")
    if intended not in INTENDED_RULES:
        raise UsageError(
            f"Entry file {shown}: intended must be one of {', '.join(INTENDED_RULES)}, "
            f"not {intended!r}."
        )
    return XrayEntry(shown, train_step, intended)


def call_step(entry: XrayEntry, model: Any, sequences: list[dict[str, list[int]]]) -> None:
    """The user's step; its failures become one line naming the entry file."""
    try:
        entry.train_step(model, sequences)
    except Exception as error:  # the user's code: every failure becomes one explained line
        detail = str(error).strip().splitlines()[0] if str(error).strip() else ""
        raise UsageError(
            f"Entry file {entry.path}: train_step failed: {type(error).__name__}"
            + (f": {detail[:200]}" if detail else "")
            + ". It is called with the tracer (a Hugging Face causal LM) and a list of "
            '{"input_ids", "labels"} sequences.'
        ) from error
