"""No code from the Hugging Face Hub while tscope builds or runs a model from a stranger's
config.json (tscope/ingest/checkpoints/hub_guard.py). Red team, session 26: RWKV's attention
fetches `kernels-community/rwkv` at construction when CUDA and ninja are present (reached by
`tscope analyze` through the parameter-order build), and `experts_implementation: sonicmoe`
fetches a kernel at a replay's first forward pass on a Hopper GPU."""

from __future__ import annotations

import os
from pathlib import Path
from types import SimpleNamespace

import pytest

transformers = pytest.importorskip("transformers")

from test_hostile_replay_model_size import saved_checkpoint  # noqa: E402

from tscope.ingest.checkpoints import param_order  # noqa: E402
from tscope.ingest.checkpoints.hub_guard import HubCodeRefused, hub_code_refused  # noqa: E402
from tscope.ingest.checkpoints.param_order import ParamSpec  # noqa: E402
from tscope.replay.model_build import build_model  # noqa: E402


def test_inside_the_guard_every_kernel_loader_refuses_and_all_is_restored_after():
    import transformers.integrations.hub_kernels as hub_kernels

    before = (
        hub_kernels.get_kernel,
        hub_kernels.lazy_load_kernel,
        os.environ.get("USE_HUB_KERNELS"),
    )
    with hub_code_refused():
        with pytest.raises(HubCodeRefused):
            hub_kernels.get_kernel("kernels-community/rwkv")
        assert hub_kernels.lazy_load_kernel("sonic-moe") is None
        assert os.environ["USE_HUB_KERNELS"] == "0"
        assert os.environ["HF_HUB_OFFLINE"] == "1"
    after = (
        hub_kernels.get_kernel,
        hub_kernels.lazy_load_kernel,
        os.environ.get("USE_HUB_KERNELS"),
    )
    assert after == before


def test_the_parameter_order_build_of_rwkv_on_a_cuda_host_fetches_no_kernel(monkeypatch):
    # As on a CUDA machine with ninja: RwkvSelfAttention.__init__ then asks the Hub for its kernel.
    import transformers.integrations.hub_kernels as hub_kernels
    from transformers.models.rwkv import modeling_rwkv

    monkeypatch.setattr(modeling_rwkv, "is_torch_cuda_available", lambda: True)
    monkeypatch.setattr(modeling_rwkv, "is_ninja_available", lambda: True)
    monkeypatch.setattr(modeling_rwkv, "is_kernels_available", lambda: True)
    fetched: list[str] = []
    monkeypatch.setattr(hub_kernels, "get_kernel", lambda name, **kwargs: fetched.append(name))
    config = transformers.RwkvConfig(
        vocab_size=32,
        hidden_size=16,
        num_hidden_layers=2,
        context_length=16,
        attention_hidden_size=16,
        intermediate_size=32,
    ).to_dict()
    config["architectures"] = ["RwkvForCausalLM"]
    params = [ParamSpec("rwkv.embeddings.weight", (32, 16))]
    param_order.architecture_order(config, params)
    assert fetched == []


def test_a_replay_builds_the_experts_eager_whatever_config_json_asks(tmp_path: Path):
    config = transformers.MixtralConfig(
        vocab_size=32,
        hidden_size=16,
        intermediate_size=32,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=1,
        num_local_experts=2,
        max_position_embeddings=32,
    )
    model = transformers.MixtralForCausalLM(config)
    files = saved_checkpoint(tmp_path, model, experts_implementation="sonicmoe")
    built = build_model(files, SimpleNamespace(build_model=None))  # type: ignore[arg-type]
    assert built.model.config._experts_implementation == "eager"
    assert any("asks for experts sonicmoe; replayed with eager" in note for note in built.notes)


def test_a_config_json_model_failing_in_its_forward_pass_is_one_line(monkeypatch):
    # On CPU, `experts_implementation: sonicmoe` ended in an ImportError traceback, exit 1; any
    # failure of a model built from a stranger's config.json is now one line naming the file.
    from any_cpu import FIXTURE_ENTRY

    from tscope.errors import UnreadableInput
    from tscope.replay import api

    def fails(*args, **kwargs):
        raise ImportError("sonic-moe kernel requires CUDA")

    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", "corrupted_batch")
    monkeypatch.setattr(api, "run_steps", fails)
    runs = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "trainer"
    with pytest.raises(UnreadableInput) as refused:
        api.replay(runs / "corrupted_batch", 145, window=(-1, 1), entry=FIXTURE_ENTRY)
    assert refused.value.path.endswith("/config.json")
    assert "fails in its forward pass (sonic-moe kernel requires CUDA)" in refused.value.problem
