"""A stranger's config.json that asks transformers to run its own code (red-team wave 2).

`tscope replay` builds the model of a Hugging Face checkpoint from its config.json. With
`auto_map` and a model type transformers does not know, transformers (trust_remote_code left
unset) asks on stdin "Do you wish to run the custom code? [y/N]": the question looks like
tscope's, and a "y" imports the .py files the stranger put in the checkpoint folder. tscope now
says no itself; the model is not built and the replay ends in one line.
"""

from __future__ import annotations

import builtins
import json
from pathlib import Path
from types import SimpleNamespace

import pytest

from tscope.errors import UsageError
from tscope.replay.model_build import _from_hf_config

pytest.importorskip("transformers")

CUSTOM_CONFIG = """
from pathlib import Path
from transformers import PretrainedConfig

Path(__file__).with_name("PWNED").write_text("code from the checkpoint ran")


class EvilConfig(PretrainedConfig):
    model_type = "evil_custom"
"""


def test_a_config_json_with_auto_map_is_never_offered_to_run(tmp_path, monkeypatch):
    checkpoint = tmp_path / "checkpoint-10"
    checkpoint.mkdir()
    config = {
        "model_type": "evil_custom",
        "architectures": ["EvilModel"],
        "auto_map": {
            "AutoConfig": "configuration_evil.EvilConfig",
            "AutoModelForCausalLM": "modeling_evil.EvilModel",
        },
    }
    (checkpoint / "config.json").write_text(json.dumps(config))
    (checkpoint / "configuration_evil.py").write_text(CUSTOM_CONFIG)
    monkeypatch.setenv("HF_MODULES_CACHE", str(tmp_path / "hf_modules"))
    asked: list[str] = []

    def fooled_user(prompt: str = "") -> str:
        asked.append(prompt)
        return "y"  # the user believes tscope is asking

    monkeypatch.setattr(builtins, "input", fooled_user)
    files = SimpleNamespace(
        choice=SimpleNamespace(path=checkpoint, shown="checkpoint-10"),
        model_config=config,
        weights=dict,  # no tensors: the refusal comes before any is needed
    )
    with pytest.raises(UsageError) as caught:
        _from_hf_config(files)  # type: ignore[arg-type]
    assert asked == []
    assert not (checkpoint / "PWNED").exists()
    assert not any(Path(tmp_path).rglob("PWNED"))
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize("asked", ["kernels-community/flash-attn2", "flash_attention_2"])
def test_a_config_json_naming_a_hub_kernel_is_built_with_local_attention(
    tmp_path, monkeypatch, asked
):
    # transformers looks such an attention up on the Hugging Face Hub (a kernel whose code it
    # downloads and imports): the replay must not even ask the network.
    import socket

    import torch
    import transformers

    checkpoint = tmp_path / "checkpoint-10"
    checkpoint.mkdir()
    config = transformers.LlamaConfig(
        vocab_size=64,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=32,
    )
    config.save_pretrained(checkpoint)
    weights = {k: v.clone() for k, v in transformers.LlamaForCausalLM(config).state_dict().items()}
    saved = json.loads((checkpoint / "config.json").read_text())
    (checkpoint / "config.json").write_text(json.dumps({**saved, "attn_implementation": asked}))
    looked_up: list[object] = []

    def no_network(*args: object, **kwargs: object) -> None:
        looked_up.append(args)
        raise OSError("tscope must not reach the network here")

    monkeypatch.setattr(socket, "getaddrinfo", no_network)
    monkeypatch.setattr(socket.socket, "connect", no_network)
    files = SimpleNamespace(
        choice=SimpleNamespace(path=checkpoint, shown="checkpoint-10"),
        model_config={**saved, "attn_implementation": asked},
    )
    model = _from_hf_config(files, weights)  # type: ignore[arg-type]
    assert looked_up == []
    assert model.config._attn_implementation == "sdpa"
    assert isinstance(model, torch.nn.Module)
