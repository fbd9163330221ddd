"""Build the run's model and load the checkpoint's weights into it.

The entry file's build_model wins; otherwise a checkpoint with a Hugging Face config.json is built
with transformers (`AutoModelForCausalLM.from_config`), the optional `hf` extra.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tscope.errors import TscopeError, UnreadableInput, UsageError
from tscope.ingest.checkpoints.module_budget import TooManyModules, module_budget, module_budget_for
from tscope.model.visible_text import visible
from tscope.replay.entry import Entry
from tscope.replay.files import CheckpointFiles

if TYPE_CHECKING:
    import torch

HF_INSTALL_HINT = "pip install 'tscope-ml[hf]'"
# How many offending names an error message lists before "...".
NAMES_SHOWN = 5
# A config.json may describe a model this much larger than the weights beside it (parameters the
# checkpoint does not store, such as untied twins), plus this many parameters for tiny models.
# Past it the config is not these weights': `vocab_size: 1e13` asked for 320 TB and
# `n_layer: 3e6` ran 30-45 s into a MemoryError before either was refused.
MAX_PARAMETERS_PER_STORED = 2
PARAMETER_SLACK = 1_000_000
# Attention implementations that run only torch code already installed (no Hub kernel).
LOCAL_ATTENTION = frozenset({"eager", "sdpa"})
HF_CONFIG_HINT = "Define build_model(config) in the entry file, or replay the run's own checkpoint"
# transformers config keys that count modules (layers, experts), each storing at least one tensor.
# Not every key naming layers counts them: Qwen2's `max_window_layers` (28 by default) exceeds a
# tiny checkpoint's tensor count.
MODULE_COUNT_KEYS = frozenset(
    {
        "n_layer",
        "n_layers",
        "num_layers",
        "num_hidden_layers",
        "num_experts",
        "num_local_experts",
        "n_routed_experts",
        "moe_num_experts",
    }
)


@dataclass
class BuiltModel:
    model: torch.nn.Module
    is_transformers: bool  # a transformers PreTrainedModel: computes its own loss from labels
    notes: list[str]


def build_model(files: CheckpointFiles, entry: Entry) -> BuiltModel:
    """The model on CPU with the checkpoint's weights, in train mode (as Trainer.training_step)."""
    config = files.model_config
    notes: list[str] = []
    if entry.build_model is not None:
        model = _call_build_model(entry, config)
        notes.append(f"model built by {entry.path}: build_model")
    elif files.choice.facts.model_from_config_json and config is not None:
        architecture = _architecture(config, files)
        weights = files.weights()
        model = _from_hf_config(files, weights)
        notes.append(f"model built from config.json ({architecture})")
        asked = config.get("attn_implementation", config.get("_attn_implementation"))
        if asked is not None and asked not in LOCAL_ATTENTION:
            notes.append(
                f"config.json asks for attention {visible(str(asked)[:80])}; replayed with sdpa "
                "(tscope fetches no kernel from the Hugging Face Hub)"
            )
        experts = config.get("experts_implementation", config.get("_experts_implementation"))
        if experts is not None and experts != "eager":
            notes.append(
                f"config.json asks for experts {visible(str(experts)[:80])}; replayed with eager "
                "(tscope fetches no kernel from the Hugging Face Hub)"
            )
        notes.extend(_load_weights(model, files, weights))
        model.train()
        return BuiltModel(model, _is_transformers(model), notes)
    else:
        from_file = files.choice.facts.model_from_config_json
        what = "config.json" if from_file else "transformers config"
        if from_file and (files.choice.path / "config.json").is_symlink():
            raise UsageError(
                f"{files.choice.shown}/config.json is a symbolic link, which tscope does not "
                "follow (it may lead outside the input): copy the file it points to into the "
                f"checkpoint folder, or define build_model(config) in the entry file ({entry.path})."
            )
        raise UsageError(
            f"{files.choice.shown} has no {what} to build the model from. Define "
            f"build_model(config) in the entry file ({entry.path})."
        )
    notes.extend(_load_weights(model, files, files.weights()))
    model.train()
    return BuiltModel(model, _is_transformers(model), notes)


def _architecture(config: dict[str, Any], files: CheckpointFiles) -> str:
    """The model class config.json names, "?" when it names none; a stranger's config.json with
    `"architectures": 5` or `[5]` is refused (it indexed into an int: a TypeError traceback)."""
    named = config.get("architectures")
    if named is None or named == []:
        return "?"
    if not isinstance(named, list) or not all(isinstance(name, str) for name in named):
        raise UnreadableInput(
            f"{files.choice.shown}/config.json",
            f"'architectures' is {str(named)[:60]}, not a list of model class names",
            f'transformers writes a list such as ["GPT2LMHeadModel"]. {HF_CONFIG_HINT}',
        )
    return str(named[0])


def _call_build_model(entry: Entry, config: dict[str, Any] | None) -> torch.nn.Module:
    import torch

    assert entry.build_model is not None
    model = entry.build_model(config)
    if not isinstance(model, torch.nn.Module):
        raise UsageError(
            f"{entry.path}: build_model returned {type(model).__name__}, not a torch.nn.Module."
        )
    return model


def _from_hf_config(
    files: CheckpointFiles, weights: dict[str, torch.Tensor] | None = None
) -> torch.nn.Module:
    """The model config.json describes, refused when far larger than `weights` (the
    checkpoint's, loaded here when not given)."""
    try:
        import transformers
    except ImportError as error:
        raise UsageError(
            f"Building the model of {files.choice.shown} from its config.json needs transformers: "
            f"{HF_INSTALL_HINT}, or define build_model(config) in the entry file."
        ) from error
    try:
        with quiet_transformers(), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            # Read from the folder itself: the same parsing (and defaults) the producer's
            # from_pretrained would apply; a local folder never touches the network.
            # trust_remote_code=False, said outright: left unset, a config.json with `auto_map`
            # makes transformers ask "Do you wish to run the custom code? [y/N]" on stdin, where
            # a "y" imports the stranger's .py files from the run folder.
            if weights is None:
                weights = files.weights()
            # First on the JSON as read: transformers' config classes build per-layer lists
            # (Qwen2's layer_types) as they are made, so `num_hidden_layers: 1e7` in a 90-byte
            # file took 34 s and 1.8 GB before the check below could run (red team round 8).
            _refuse_more_layers_than_tensors(files.model_config or {}, weights, files)
            config = transformers.AutoConfig.from_pretrained(
                str(files.choice.path), trust_remote_code=False
            )
            _refuse_more_layers_than_tensors(config.to_dict(), weights, files)
            local = local_implementations(config)
            _refuse_more_parameters_than_stored(config, weights, files, transformers, local)
            model: torch.nn.Module = transformers.AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
                config, trust_remote_code=False, **local
            )
    except (ValueError, KeyError, OSError) as error:
        raise UsageError(
            f"transformers cannot build the model of {files.choice.shown}/config.json "
            f"({_first_line(error)}). Define build_model(config) in the entry file."
        ) from error
    except TscopeError:  # a refusal above, already one line
        raise
    except Exception as error:  # a stranger's config: any failure is one line
        # RuntimeError, MemoryError, TypeError, RecursionError: what a crafted value makes
        # transformers or torch raise while building.
        raise UnreadableInput(
            f"{files.choice.shown}/config.json",
            f"transformers cannot build the model it describes ({_first_line(error)})",
            HF_CONFIG_HINT,
        ) from error
    return model


def local_implementations(config: Any) -> dict[str, str]:
    """The implementation choices the model is built with: attention always (local_attention),
    and the experts' (MoE) only when the config asks for one other than eager: `sonicmoe` or
    `deepgemm` fetch a kernel from the Hugging Face Hub at the first forward pass (red team,
    session 26); eager runs torch code."""
    chosen = {"attn_implementation": local_attention(config)}
    experts = getattr(config, "_experts_implementation", None)
    if experts is not None and experts != "eager":
        chosen["experts_implementation"] = "eager"
    return chosen


def local_attention(config: Any) -> str:
    """The attention implementation the model is built with: the config's own when it is one
    that runs torch code installed here, else "sdpa" (transformers' default). Any other value is
    looked up by transformers on the Hugging Face Hub: a config.json naming
    `kernels-community/flash-attn2` (or `flash_attention_2` without flash-attn installed) made
    the replay query the Hub for a kernel to download and import, a stranger's code."""
    named = getattr(config, "_attn_implementation", None)
    return named if named in LOCAL_ATTENTION else "sdpa"


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return (text.splitlines()[0] if text else type(error).__name__)[:200]


def _refuse_more_layers_than_tensors(
    config: Mapping[str, Any], weights: dict[str, torch.Tensor], files: CheckpointFiles
) -> None:
    """Every layer or expert of a model stores at least one tensor: more of them than the
    checkpoint has tensors is a crafted count. Checked before any module exists, since even on
    the meta device `n_layer: 3e6` would build millions of modules (minutes, gigabytes); nested
    configs (`text_config`, `vision_config`) are read too."""
    pending: list[tuple[Mapping[str, Any], int]] = [(config, 0)]
    while pending:
        mapping, depth = pending.pop()
        for key, value in mapping.items():
            if isinstance(value, Mapping) and depth < MAX_CONFIG_NESTING:
                pending.append((value, depth + 1))
            elif key in MODULE_COUNT_KEYS and _count(value) > len(weights):
                raise UnreadableInput(
                    f"{files.choice.shown}/config.json",
                    f"{key} = {value}, more than the {len(weights)} tensors the checkpoint stores",
                    HF_CONFIG_HINT,
                )


# Sub-configs nest one or two levels (a multimodal model's text_config); deeper is not read.
MAX_CONFIG_NESTING = 4


def _count(value: Any) -> float:
    """A count as JSON or a config class gives it (an int, or a float such as 1e7), else 0."""
    if type(value) is int or (type(value) is float and value == value):
        return float(value)
    return 0.0


def _refuse_more_parameters_than_stored(
    config: Any,
    weights: dict[str, torch.Tensor],
    files: CheckpointFiles,
    transformers: Any,
    local: dict[str, str],
) -> None:
    """Build the model on torch's meta device (shapes only, no memory) and refuse a config whose
    model is far larger than the weights beside it, in modules (counted while they are built,
    whatever the config calls its counts) or in parameters."""
    import torch

    most_modules = module_budget_for(len(weights))
    try:
        with torch.device("meta"), module_budget(most_modules):
            skeleton = transformers.AutoModelForCausalLM.from_config(
                config, trust_remote_code=False, **local
            )
    except TooManyModules as error:
        raise UnreadableInput(
            f"{files.choice.shown}/config.json",
            f"it describes a model of {error}, for a checkpoint of {len(weights):,} tensors",
            HF_CONFIG_HINT,
        ) from error
    # Buffers too: GPT-J's position table (n_positions × rotary_dim) is one, not a parameter;
    # `n_positions: 5e7` beside 44 KB of weights took 6 GB (red team, session 26).
    wanted = sum(parameter.numel() for parameter in skeleton.parameters()) + sum(
        buffer.numel() for buffer in skeleton.buffers()
    )
    stored = sum(tensor.numel() for tensor in weights.values())
    if wanted > MAX_PARAMETERS_PER_STORED * stored + PARAMETER_SLACK:
        raise UnreadableInput(
            f"{files.choice.shown}/config.json",
            f"it describes a model of {wanted:,} parameters, but the checkpoint stores "
            f"{stored:,} weights",
            HF_CONFIG_HINT,
        )


@contextmanager
def quiet_transformers() -> Iterator[None]:
    """transformers' logger at ERROR while it is used: its init chatter and the per-model
    "loss_type=None ... unrecognized" notice say nothing about the replay."""
    module = sys.modules.get("transformers")
    if module is None:  # never imported: nothing will log
        yield
        return
    verbosity = module.logging.get_verbosity()
    module.logging.set_verbosity(logging.ERROR)
    try:
        yield
    finally:
        module.logging.set_verbosity(verbosity)


def _load_weights(
    model: torch.nn.Module, files: CheckpointFiles, weights: dict[str, torch.Tensor]
) -> list[str]:
    notes = _match_dtype(model, weights)
    result = model.load_state_dict(weights, strict=False)
    if result.unexpected_keys:
        raise UsageError(
            f"{files.choice.shown} holds weights the model does not have: "
            f"{_names(result.unexpected_keys)}. The model built for the replay differs from the "
            "run's; check build_model."
        )
    # Tied weights (lm_head = token embedding) are stored once: a missing name is fine when its
    # parameter *is* one that was loaded.
    by_name = dict(model.named_parameters(remove_duplicate=False))
    loaded_ids = {id(by_name[name]) for name in weights if name in by_name}
    untied = [
        n for n in result.missing_keys if n not in by_name or id(by_name[n]) not in loaded_ids
    ]
    if untied:
        raise UsageError(
            f"{files.choice.shown} lacks weights the model needs: {_names(untied)}. The model "
            "built for the replay differs from the run's; check build_model."
        )
    tied = sorted(set(result.missing_keys) - set(untied))
    if tied:
        notes.append(f"tied weights restored through their stored twin: {', '.join(tied)}")
    return notes


def _match_dtype(model: torch.nn.Module, weights: dict[str, torch.Tensor]) -> list[str]:
    """Train in the dtype the weights were saved in (load_state_dict would silently cast)."""
    stored = {t.dtype for t in weights.values() if t.is_floating_point()}
    current = {p.dtype for p in model.parameters() if p.is_floating_point()}
    if len(stored) == 1 and stored != current:
        (dtype,) = stored
        model.to(dtype=dtype)
        return [f"model cast to the checkpoint's {str(dtype).removeprefix('torch.')} weights"]
    return []


def _names(names: list[str]) -> str:
    shown = ", ".join(names[:NAMES_SHOWN])
    return shown + (f" (and {len(names) - NAMES_SHOWN} more)" if len(names) > NAMES_SHOWN else "")


def _is_transformers(model: Any) -> bool:
    """A transformers PreTrainedModel, told by its class tree (no transformers import needed)."""
    return any(cls.__name__ == "PreTrainedModel" for cls in type(model).__mro__)
