"""Where the statistics look in a model, found from its module tree and config alone.

    blocks = transformer_blocks(model)   # [("transformer.h.0", Block), ("transformer.h.1", ...)]
    block_of("transformer.h.1.attn.c_attn.weight", blocks)  # "transformer.h.1"

Blocks are the children of the first nn.ModuleList (in named_modules order) with at least
MIN_BLOCKS entries: GPT-2 and nanoGPT `transformer.h`, Llama/Mistral/Mixtral `model.layers`.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tscope.model.plain_digits import is_plain_digits

if TYPE_CHECKING:
    import torch

# A one-entry ModuleList is more often a wrapper (a single head, a one-expert list) than the stack
# of transformer blocks, and a one-block model has no depth to compare anyway.
MIN_BLOCKS = 2
OUTPUT_HEAD_NAME = "lm_head"  # nanoGPT's and most Hugging Face causal LMs' output projection


def transformer_blocks(model: torch.nn.Module) -> list[tuple[str, torch.nn.Module]]:
    """(qualified name, module) of each transformer block; [] when no ModuleList qualifies."""
    import torch

    for name, module in model.named_modules():
        if isinstance(module, torch.nn.ModuleList) and len(module) >= MIN_BLOCKS:
            prefix = f"{name}." if name else ""
            return [(f"{prefix}{index}", child) for index, child in enumerate(module)]
    return []


def block_of(parameter_name: str, block_names: list[str]) -> str | None:
    """The block a parameter belongs to ("transformer.h.0.ln_1.weight" → "transformer.h.0")."""
    if not block_names:
        return None
    prefix = block_names[0].rpartition(".")[0]  # the ModuleList's own name ("" at the root)
    start = f"{prefix}." if prefix else ""
    if not parameter_name.startswith(start):
        return None
    index = parameter_name[len(start) :].split(".", 1)[0]
    return f"{start}{index}" if is_plain_digits(index) else None


def model_config(model: torch.nn.Module, config: Any = None) -> Any:
    """The config to read sizes from: the one given, else `model.config` (HF and nanoGPT)."""
    return config if config is not None else getattr(model, "config", None)


def config_value(config: Any, *names: str) -> Any:
    """The first of `names` set in `config` (an object or a dict); None when none is."""
    if config is None:
        return None
    for name in names:
        value = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
        if value is not None:
            return value
    return None


def output_head(model: torch.nn.Module) -> tuple[str, torch.nn.Module] | None:
    """(name, module) producing the output logits: HF get_output_embeddings(), else `lm_head`."""
    head: Any = None
    getter = getattr(model, "get_output_embeddings", None)
    if callable(getter):
        try:
            head = getter()
        except (AttributeError, NotImplementedError):  # models without an output embedding
            head = None
    for name, module in model.named_modules():
        named_head = head is None and name.rpartition(".")[2] == OUTPUT_HEAD_NAME
        if module is head or named_head:
            return name, module
    return None
