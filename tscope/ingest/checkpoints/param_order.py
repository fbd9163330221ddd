"""The order in which a model registers its parameters, recovered without the model's code.

Optimizer ids follow `named_parameters()` order, but safetensors files list tensors sorted by
name. With transformers installed, the architecture named in config.json is built on the meta
device for the exact order; otherwise module names stand in for it (wte before wpe, ln_1 before
attn, q before k before v), which `optimizer_mapping` then validates by shapes.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tscope.ingest.checkpoints.hub_guard import hub_code_refused
from tscope.ingest.checkpoints.module_budget import module_budget, module_budget_for
from tscope.model.plain_digits import is_plain_digits


@dataclass(frozen=True)
class ParamSpec:
    name: str
    shape: tuple[int, ...]


# Module names say a lot about registration order across the common architectures. This is the
# order they are registered in, earliest first. One name may sit at different depths (c_proj
# closes both attention and MLP), so the list only has to be right among siblings. Checked in
# tests against transformers' GPT-2, Llama, Qwen2, Mixtral, GPT-NeoX, GPT-J and Falcon, and the
# demo's nanoGPT. Known gap: OPT registers its decoder's final_layer_norm before the layers.
# fmt: off
_REGISTRATION_ORDER = (
    # top-level containers, then embeddings
    "transformer", "model", "gpt_neox", "bert", "roberta",
    "wte", "embed_tokens", "word_embeddings", "tok_embeddings", "tok_emb", "token_embedding",
    "embed_in", "shared", "embeddings", "wpe", "position_embeddings", "embed_positions",
    "pos_emb", "position_embedding", "token_type_embeddings", "emb_ln", "ln_emb", "ln_embd",
    # the stack of blocks
    "encoder", "decoder", "h", "layers", "layer", "blocks", "block",
    # inside a block: pre-attention norm, attention, post-attention norm, MLP
    "ln_1", "ln1", "input_layernorm", "attention_norm", "norm1", "attn_norm",
    "attn", "self_attn", "attention", "self_attention", "self", "mixer",
    "c_attn", "query_key_value", "qkv_proj", "qkv", "wqkv",
    "q_proj", "query", "q", "wq", "k_proj", "key", "k", "wk", "v_proj", "value", "v", "wv",
    "o_proj", "out_proj", "wo", "q_norm", "k_norm",
    "self_attn_layer_norm",
    "ln_2", "ln2", "post_attention_layernorm", "ffn_norm", "norm2", "pre_feedforward_layernorm",
    "mlp", "feed_forward", "ffn", "block_sparse_moe", "moe", "intermediate",
    "gate", "experts", "c_fc", "fc_in", "fc1", "w1", "gate_proj", "up_proj", "gate_up_proj",
    "dense_h_to_4h",
    "w2", "w3", "fc2", "fc_out", "down_proj", "dense_4h_to_h", "c_proj", "dense",
    "post_feedforward_layernorm", "output",
    # after the stack: final norm, output head
    "ln_f", "norm_f", "norm", "final_layernorm", "final_layer_norm", "final_norm",
    "lm_head", "embed_out",
    # a module's own parameters: nn.Linear registers weight before bias
    "weight", "bias",
)
# fmt: on
_RANK = {name: rank for rank, name in enumerate(_REGISTRATION_ORDER)}
_UNKNOWN_RANK = _RANK["output"]  # unknown modules: after the known block parts, before the head
# Llama-style decoder layers register self_attn and mlp before their two norms
# (LlamaDecoderLayer.__init__); GPT-2-style blocks register each norm before its sub-layer.
# fmt: off
_BLOCK_NORMS = (
    "ln_1", "ln1", "input_layernorm", "attention_norm", "norm1", "attn_norm",
    "ln_2", "ln2", "post_attention_layernorm", "ffn_norm", "norm2", "pre_feedforward_layernorm",
    "post_feedforward_layernorm",
)
# fmt: on
_NORMS_LAST_RANK = {
    name: _RANK["post_feedforward_layernorm"] + 1 + i for i, name in enumerate(_BLOCK_NORMS)
}
# fmt: off
NORMS_LAST_MODEL_TYPES = frozenset({
    "llama", "mistral", "mixtral", "qwen2", "qwen2_moe", "qwen3", "qwen3_moe", "gemma", "gemma2",
    "gemma3_text", "phi3", "olmo", "olmo2", "granite", "starcoder2", "cohere", "deepseek_v2",
    "deepseek_v3", "smollm3", "glm", "falcon",
})
# Architectures that register some siblings in another order: the listed names trade ranks so
# that they come in the order given (OPT and GPT-J build k, v, q; GPT-NeoX both norms first).
_SIBLING_ORDER_BY_MODEL_TYPE = {
    "opt": ("k_proj", "v_proj", "q_proj"),
    "gptj": ("k_proj", "v_proj", "q_proj"),
    "codegen": ("k_proj", "v_proj", "q_proj"),
    "gpt_neox": ("input_layernorm", "post_attention_layernorm", "attention"),
}
# fmt: on


def _ranks(model_type: str | None, norms_last: bool) -> dict[str, int]:
    ranks = dict(_RANK)
    if norms_last:
        ranks.update(_NORMS_LAST_RANK)
    swapped = _SIBLING_ORDER_BY_MODEL_TYPE.get(model_type or "", ())
    ranks.update(zip(swapped, sorted(ranks[name] for name in swapped), strict=True))
    return ranks


def _segment_key(segment: str, ranks: dict[str, int]) -> tuple[int, int, str]:
    if is_plain_digits(segment):  # ModuleList index: numeric order
        return (-1, int(segment), "")
    return (ranks.get(segment.lower(), _UNKNOWN_RANK), 0, segment)


def inferred_orders(
    params: Sequence[ParamSpec], model_type: str | None = None
) -> list[tuple[str, list[ParamSpec]]]:
    """Candidate named_parameters() orders for parameters whose stored order is alphabetical."""

    def ordered(norms_last: bool) -> list[ParamSpec]:
        ranks = _ranks(model_type, norms_last)
        return sorted(
            params, key=lambda p: tuple(_segment_key(s, ranks) for s in p.name.split("."))
        )

    norms_first = ("module order inferred from names", ordered(False))
    norms_last = ("module order inferred from names (norms after sub-layers)", ordered(True))
    natural = ("name order", sorted(params, key=lambda p: _natural_key(p.name)))
    if model_type in NORMS_LAST_MODEL_TYPES:
        return [norms_last, norms_first, natural]
    return [norms_first, norms_last, natural]


def _natural_key(name: str) -> tuple[tuple[int, int | str], ...]:
    return tuple((0, int(s)) if is_plain_digits(s) else (1, s) for s in name.split("."))


def architecture_order(
    config: Mapping[str, Any], params: Sequence[ParamSpec]
) -> list[ParamSpec] | None:
    """The exact named_parameters() order of the architecture a Hugging Face config.json names.

    The model is built on torch's meta device (no memory, no weights) from transformers' own
    classes; custom code (`auto_map`) is never imported or run. None when transformers is not
    installed, the architecture is not built in, or its names do not cover the stored ones.
    """
    architectures = config.get("architectures")
    if not isinstance(architectures, list) or not architectures or config.get("auto_map"):
        return None
    # A config that asks for thousands of layers would take long to build even on meta.
    if _too_many_modules(config):
        return None
    names = _architecture_names(
        json.dumps(config, sort_keys=True), str(architectures[0]), module_budget_for(len(params))
    )
    if names is None:
        return None
    by_name = {spec.name: spec for spec in params}
    if not set(by_name) <= set(names):
        return None
    return [by_name[name] for name in names if name in by_name]


MAX_LAYERS_TO_BUILD = 512  # deepest public LLMs have ~130 blocks
# Layers times experts per layer: DeepSeek-V3 builds 61 x 256, Qwen3-Next 48 x 512.
MAX_EXPERT_LAYERS_TO_BUILD = 64 * MAX_LAYERS_TO_BUILD
# The keys whose number says how many modules transformers builds, whatever the architecture
# calls them: num_hidden_layers, n_layer, encoder_layers and decoder_layers (Bart: 12,000 each
# took 45 s and 1.6 GB on meta), num_encoder_layers, num_blocks, depths (Swin's list),
# num_local_experts, n_routed_experts; in nested configs too (text_config, vision_config).
_LAYER_COUNT_KEY = re.compile(r"(layers?|blocks|depths?)$", re.IGNORECASE)
_EXPERT_COUNT_KEY = re.compile(r"experts$", re.IGNORECASE)
_CONFIG_NESTING_READ = 8  # nested configs (text_config, vision_config) sit one or two deep


def _too_many_modules(config: Mapping[str, Any]) -> bool:
    """Some count in the config (nested ones included) asks for more layers or experts than
    MAX_LAYERS_TO_BUILD, or their product is over MAX_EXPERT_LAYERS_TO_BUILD; a config nested
    past _CONFIG_NESTING_READ is not built either."""
    layers = experts = 0
    pending: list[tuple[Mapping[str, Any], int]] = [(config, 0)]
    while pending:
        mapping, depth = pending.pop()
        if depth > _CONFIG_NESTING_READ:
            return True
        for key, value in mapping.items():
            if isinstance(value, Mapping):
                pending.append((value, depth + 1))
                continue
            if not isinstance(key, str):
                continue
            if _LAYER_COUNT_KEY.search(key):
                layers = max(layers, _count(value, key.lower().endswith("depths")))
            elif _EXPERT_COUNT_KEY.search(key):
                experts = max(experts, _count(value, False))
    return (
        layers > MAX_LAYERS_TO_BUILD
        or experts > MAX_LAYERS_TO_BUILD
        or layers * max(experts, 1) > MAX_EXPERT_LAYERS_TO_BUILD
    )


def _count(value: Any, summed: bool) -> int:
    """A count a config gives: an int, or a list's length (Llama 4's moe_layers lists layer
    indices), or with `summed` the sum of a list of ints (Swin's depths: blocks per stage)."""
    if isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value
    if isinstance(value, list):
        if summed and all(isinstance(v, int) and not isinstance(v, bool) for v in value):
            return sum(value)
        return len(value)
    return 0


@functools.lru_cache(maxsize=8)
def _architecture_names(
    config_json: str, architecture: str, most_modules: int
) -> tuple[str, ...] | None:
    try:
        import torch
        import transformers
    except ImportError:  # transformers is an optional extra: fall back to inferred orders
        return None
    model_class = getattr(transformers, architecture, None)
    if not isinstance(model_class, type) or not issubclass(
        model_class, transformers.PreTrainedModel
    ):
        return None
    verbosity = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity(logging.ERROR)
    try:
        with (
            warnings.catch_warnings(),
            torch.device("meta"),
            module_budget(most_modules),
            hub_code_refused(),
        ):
            warnings.simplefilter("ignore")
            config = model_class.config_class.from_dict(json.loads(config_json))  # type: ignore[union-attr]
            model = model_class(config)
        return tuple(name for name, _ in model.named_parameters())
    except Exception:  # any config transformers cannot build (TooManyModules included): use the
        # inferred orders instead
        return None
    finally:
        transformers.logging.set_verbosity(verbosity)
