"""A config.json asking for thousands of layers under any name is never built, even on meta.

The guard once read only num_hidden_layers/n_layer/num_layers/n_layers: a 300-byte config naming
BartModel with encoder_layers = decoder_layers = 12000 took 45 s and 1.6 GB to build.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

import tscope
from tscope.ingest.checkpoints import param_order
from tscope.ingest.checkpoints.module_budget import module_budget_for
from tscope.ingest.checkpoints.param_order import MAX_LAYERS_TO_BUILD, ParamSpec

LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layouts"
PARAMS = [ParamSpec("emb.weight", (4, 4))]
BART = {
    "architectures": ["BartModel"],
    "model_type": "bart",
    "d_model": 16,
    "encoder_attention_heads": 1,
    "decoder_attention_heads": 1,
    "encoder_ffn_dim": 16,
    "decoder_ffn_dim": 16,
    "vocab_size": 32,
    "max_position_embeddings": 8,
}
TOO_MANY = 24 * MAX_LAYERS_TO_BUILD


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The architectures architecture_order asks transformers to build (none is built)."""
    asked: list[str] = []

    def spy(config_json: str, architecture: str, most_modules: int) -> None:
        asked.append(architecture)

    monkeypatch.setattr(param_order, "_architecture_names", spy)
    return asked


@pytest.mark.parametrize(
    "counts",
    [
        pytest.param({"encoder_layers": TOO_MANY, "decoder_layers": TOO_MANY}, id="bart"),
        pytest.param({"encoder_layers": TOO_MANY}, id="encoder-only"),
        pytest.param({"decoder_layers": TOO_MANY}, id="decoder-only"),
        pytest.param({"num_encoder_layers": TOO_MANY}, id="num-encoder-layers"),
        pytest.param({"text_config": {"num_hidden_layers": TOO_MANY}}, id="nested"),
        pytest.param({"num_hidden_layers": 64, "num_local_experts": TOO_MANY}, id="experts"),
        pytest.param({"depths": [2, TOO_MANY, 2]}, id="depths"),
    ],
)
def test_a_config_asking_for_too_many_layers_is_not_built(
    builds: list[str], counts: dict[str, Any]
) -> None:
    assert param_order.architecture_order({**BART, **counts}, PARAMS) is None
    assert builds == []


def test_a_config_of_ordinary_size_is_still_built(builds: list[str]) -> None:
    config = {**BART, "encoder_layers": 12, "decoder_layers": 12, "num_hidden_layers": 12}
    assert param_order.architecture_order(config, PARAMS) is None  # the spy builds nothing
    assert builds == ["BartModel"]


def test_an_accelerate_run_whose_config_asks_for_12000_layers_is_read_without_building_it(
    tmp_path: Path, builds: list[str]
) -> None:
    run = tmp_path / "run"
    shutil.copytree(LAYOUTS / "accelerate_lr_jump", run)
    for step in ("step_2", "step_4", "step_6"):
        config = {**BART, "encoder_layers": 12_000, "decoder_layers": 12_000}
        (run / step / "config.json").write_text(json.dumps(config))

    case = tscope.analyze(run)

    assert builds == []
    assert case.partial == []
    # The rest is read as before: the learning-rate jump between steps 2 and 4 is found.
    headline = next(f for f in case.findings if f.id == case.summary.headline_finding)
    assert headline.category == "lr_schedule_jump" and headline.step == 4


def test_a_count_under_a_name_no_check_knows_stops_at_the_module_budget() -> None:
    # Funnel's `block_sizes` is no key _too_many_modules reads: 30,000 blocks took 96 s and 2 GB
    # on meta (red team). Modules are counted as transformers builds them.
    pytest.importorskip("transformers")
    from torch.nn.modules.module import register_module_module_registration_hook

    funnel = {
        "architectures": ["FunnelModel"],
        "model_type": "funnel",
        "block_sizes": [30_000],
        "block_repeats": [1],
        "num_decoder_layers": 1,
        "d_model": 8,
        "n_head": 1,
        "d_head": 8,
        "d_inner": 8,
        "vocab_size": 10,
    }
    registered: list[str] = []
    handle = register_module_module_registration_hook(lambda m, name, sub: registered.append(name))
    try:
        assert param_order.architecture_order(funnel, PARAMS) is None
    finally:
        handle.remove()
    assert 0 < len(registered) <= module_budget_for(len(PARAMS)) + 1
