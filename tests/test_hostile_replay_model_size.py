"""A stranger's config.json for `tscope replay`: refused in one line naming config.json.

`"architectures": 5` indexed into an int (TypeError), `vocab_size: 1e13` asked torch for 320 TB
(RuntimeError), `n_layer: 3e6` built modules for 30-45 s into a MemoryError. Now the field is
checked, the layer count is bounded by the tensors the checkpoint stores, the model is sized on
the meta device against the stored weights, and any other failure is one UnreadableInput line.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from tscope.errors import UnreadableInput
from tscope.replay.model_build import build_model

transformers = pytest.importorskip("transformers")


def _checkpoint(tmp_path: Path, **changes: Any) -> SimpleNamespace:
    """A tiny GPT-2 checkpoint whose config.json carries `changes`, as CheckpointFiles shows it."""
    config = transformers.GPT2Config(n_layer=1, n_embd=8, n_head=1, vocab_size=16, n_positions=16)
    return saved_checkpoint(tmp_path, transformers.GPT2LMHeadModel(config), **changes)


def saved_checkpoint(tmp_path: Path, model: Any, **changes: Any) -> SimpleNamespace:
    """`model` saved as a Trainer checkpoint whose config.json carries `changes`, as
    CheckpointFiles shows it to build_model."""
    folder = tmp_path / "checkpoint-10"
    model.save_pretrained(folder)
    saved = json.loads((folder / "config.json").read_text())
    saved.update(changes)
    (folder / "config.json").write_text(json.dumps(saved))
    weights = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    facts = SimpleNamespace(model_from_config_json=True)
    choice = SimpleNamespace(path=folder, shown="checkpoint-10", facts=facts)
    return SimpleNamespace(choice=choice, model_config=saved, weights=lambda: weights)


def _refusal(files: SimpleNamespace) -> str:
    with pytest.raises(UnreadableInput) as caught:
        build_model(files, SimpleNamespace(build_model=None))  # type: ignore[arg-type]
    assert caught.value.path == "checkpoint-10/config.json"
    assert "\n" not in str(caught.value)
    return caught.value.problem


@pytest.mark.parametrize("architectures", [5, [5], "GPT2LMHeadModel"])
def test_architectures_that_are_not_a_list_of_names_are_refused(tmp_path: Path, architectures):
    problem = _refusal(_checkpoint(tmp_path, architectures=architectures))
    assert "'architectures'" in problem


def test_an_empty_architectures_list_still_builds(tmp_path: Path):
    built = build_model(_checkpoint(tmp_path, architectures=[]), SimpleNamespace(build_model=None))  # type: ignore[arg-type]
    assert "model built from config.json (?)" in built.notes


def test_a_vocabulary_far_beyond_the_stored_weights_is_refused(tmp_path: Path):
    problem = _refusal(_checkpoint(tmp_path, vocab_size=10**13))
    assert "80,000,000,001,016 parameters" in problem


def test_more_layers_than_stored_tensors_are_refused_before_building(tmp_path: Path):
    problem = _refusal(_checkpoint(tmp_path, n_layer=200))
    assert problem.startswith("n_layer = 200, more than the")


def test_any_other_failure_while_building_is_one_line(tmp_path: Path):
    # A negative width: torch raises RuntimeError (negative dimension) while building.
    problem = _refusal(_checkpoint(tmp_path, n_embd=-8))
    assert problem.startswith("transformers cannot build the model it describes")


def test_modules_counted_under_a_name_no_check_knows_are_refused_while_building(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
):
    # Every architecture names its counts its own way (Funnel's `block_sizes`): with the key
    # check blind, the module budget stops the build on meta, wherever the count came from.
    monkeypatch.setattr("tscope.replay.model_build.MODULE_COUNT_KEYS", frozenset())
    problem = _refusal(_checkpoint(tmp_path, n_layer=1000))
    assert problem.startswith("it describes a model of more than")
    assert "modules, for a checkpoint of" in problem


def test_a_position_table_far_beyond_the_weights_is_refused_before_it_is_allocated(
    tmp_path: Path,
):
    # GPT-J keeps n_positions × rotary_dim floats as a buffer, not a parameter: `n_positions:
    # 5e7` beside 44 KB of weights took 6 GB (red team, session 26). Buffers count too.
    config = transformers.GPTJConfig(
        n_layer=1, n_embd=16, n_head=2, rotary_dim=8, vocab_size=32, n_positions=16
    )
    model = transformers.GPTJForCausalLM(config)
    files = saved_checkpoint(tmp_path, model, n_positions=50_000_000)
    problem = _refusal(files)
    assert problem.startswith("it describes a model of 400,0")


def test_a_layer_count_is_refused_before_transformers_reads_the_config(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Config classes build per-layer lists as they are made (Qwen2's layer_types): a 90-byte
    # config.json with num_hidden_layers 1e7 took 34 s and 1.8 GB in AutoConfig before the
    # count was checked (red team round 8). Nested sub-configs are read too.
    def no_config(*_: Any, **__: Any) -> None:
        raise AssertionError("AutoConfig read a config whose counts were never checked")

    monkeypatch.setattr(transformers.AutoConfig, "from_pretrained", no_config)
    problem = _refusal(_checkpoint(tmp_path, num_hidden_layers=10_000_000))
    assert problem.startswith("num_hidden_layers = 10000000")
    problem = _refusal(_checkpoint(tmp_path, text_config={"num_hidden_layers": 1e9}))
    assert problem.startswith("num_hidden_layers = 1000000000.0")
