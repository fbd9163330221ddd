"""A bound on how many torch modules a stranger's config.json may have built.

tscope builds models from a run's config.json in two places: on torch's meta device to learn the
parameter order (param_order.py) and for a replay (replay/model_build.py). Checking the counts a
config gives by their key names cannot be complete: every architecture names its own
(`num_hidden_layers`, `depths`, Funnel's `block_sizes`: a 201-byte config.json asking for 30,000
blocks took 96 s and 2 GB on meta before it was noticed, red team session 26). A model's
modules are counted as they are built instead, whatever the config called them: past the budget
the build stops with TooManyModules.

The budget follows from the weights beside the config: a module of a real model stores a few
tensors or none (activations, dropout), so a model far beyond MODULES_PER_STORED_TENSOR modules
per stored tensor is not the one these weights came from.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

# GPT-2, Llama, Mixtral, T5 build 1-2 modules per stored tensor; 8 leaves room for models with
# many parameter-free modules, and the slack for weights that are a small part of the model.
MODULES_PER_STORED_TENSOR = 8
MODULE_SLACK = 2_000


class TooManyModules(Exception):
    """Building went past the budget; `most` is the budget."""

    def __init__(self, most: int) -> None:
        super().__init__(f"more than {most:,} modules")
        self.most = most


def module_budget_for(stored_tensors: int) -> int:
    return MODULES_PER_STORED_TENSOR * stored_tensors + MODULE_SLACK


@contextmanager
def module_budget(most: int) -> Iterator[None]:
    """Within the block, registering more than `most` submodules (in any module: torch counts
    every `add_module`, attribute and ModuleList entry) raises TooManyModules."""
    from torch.nn.modules.module import register_module_module_registration_hook

    registered = [0]

    def count(module: Any, name: str, submodule: Any) -> None:
        registered[0] += 1
        if registered[0] > most:
            raise TooManyModules(most)

    handle = register_module_module_registration_hook(count)
    try:
        yield
    finally:
        handle.remove()
