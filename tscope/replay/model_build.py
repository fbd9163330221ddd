"""Build the run's model and load the checkpoint's weights into it.

The entry file's build_model wins; otherwise a checkpoint with a Hugging Face config.json is built
with transformers (`AutoModelForCausalLM.from_config`), the optional `hf` extra.
"""

from __future__ import annotations

import logging
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from tscope.errors import UsageError
from tscope.replay.entry import Entry
from tscope.replay.files import CheckpointFiles

if TYPE_CHECKING:
    import torch

HF_INSTALL_HINT = "pip install 'tscope-ml[hf]'"
# How many offending names an error message lists before "...".
NAMES_SHOWN = 5


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
        model = _from_hf_config(files)
        notes.append(f"model built from config.json ({config.get('architectures', ['?'])[0]})")
    else:
        from_file = files.choice.facts.model_from_config_json
        what = "config.json" if from_file else "transformers config"
        raise UsageError(
            f"{files.choice.shown} has no {what} to build the model from. Define "
            f"build_model(config) in the entry file ({entry.path})."
        )
    notes.extend(_load_weights(model, files))
    model.train()
    return BuiltModel(model, _is_transformers(model), notes)


def _call_build_model(entry: Entry, config: dict[str, Any] | None) -> torch.nn.Module:
    import torch

    assert entry.build_model is not None
    model = entry.build_model(config)
    if not isinstance(model, torch.nn.Module):
        raise UsageError(
            f"{entry.path}: build_model returned {type(model).__name__}, not a torch.nn.Module."
        )
    return model


def _from_hf_config(files: CheckpointFiles) -> torch.nn.Module:
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
            config = transformers.AutoConfig.from_pretrained(
                str(files.choice.path), trust_remote_code=False
            )
            model: torch.nn.Module = transformers.AutoModelForCausalLM.from_config(  # type: ignore[no-untyped-call]
                config, trust_remote_code=False
            )
    except (ValueError, KeyError, OSError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        raise UsageError(
            f"transformers cannot build the model of {files.choice.shown}/config.json "
            f"({first[:200]}). Define build_model(config) in the entry file."
        ) from error
    return model


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


def _load_weights(model: torch.nn.Module, files: CheckpointFiles) -> list[str]:
    weights = files.weights()
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
