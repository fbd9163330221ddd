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
    files = SimpleNamespace(choice=SimpleNamespace(path=checkpoint, shown="checkpoint-10"))
    with pytest.raises(UsageError) as caught:
        _from_hf_config(files)  # type: ignore[arg-type]
    assert asked == []
    assert not (checkpoint / "PWNED").exists()
    assert not any(Path(tmp_path).rglob("PWNED"))
    assert "\n" not in str(caught.value)
