"""Checkpoint readers on real files: the Trainer fixture runs, checkpoints written at test time by
transformers (sharded safetensors, legacy .bin) and by the demo's nanoGPT model, plain state-dict
files; optimizer ids mapped to names and checked against the producer's own grouping."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints import param_order
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.hf_trainer import HfTrainerReader
from tscope.ingest.checkpoints.nanogpt import NanoGptReader
from tscope.ingest.checkpoints.registry import CHECKPOINT_READERS, find_checkpoints
from tscope.ingest.checkpoints.state_dict_files import StateDictFileReader, step_from_name

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "trainer"
FIXTURE_CHECKPOINTS = sorted(RUNS.glob("*/checkpoint-*"))
OPTIONS = LoadOptions()


def open_hf(path: Path, shown: str = "ckpt"):  # type: ignore[no-untyped-def]
    return HfTrainerReader().open(path, shown, OPTIONS)


def trainer_id_to_name(model: torch.nn.Module) -> dict[int, str]:
    """The Trainer's own grouping: create_optimizer's two groups, ids numbered across them."""
    from transformers import Trainer

    decay = set(Trainer.get_decay_parameter_names(None, model))  # self is unused
    named = [n for n, p in model.named_parameters() if p.requires_grad]
    ordered = [n for n in named if n in decay] + [n for n in named if n not in decay]
    return dict(enumerate(ordered))


def identical(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Bit-equal, NaN included (lr_blowup's last checkpoint is NaN throughout)."""
    return a.shape == b.shape and bool(torch.equal(a.view(torch.int32), b.view(torch.int32)))


# --- Hugging Face Trainer fixture checkpoints ----------------------------------------------------


def test_run_dirs_list_their_checkpoints_in_step_order_and_skip_logs():
    found = find_checkpoints(RUNS / "stable")
    assert [(reader.name, shown) for reader, _, shown in found] == [
        ("hf_trainer", "checkpoint-120"),
        ("hf_trainer", "checkpoint-180"),
        ("hf_trainer", "checkpoint-240"),
    ]
    # one checkpoint folder given directly is itself the checkpoint, named by its folder
    single = find_checkpoints(RUNS / "stable" / "checkpoint-180")
    assert [(r.name, shown) for r, _, shown in single] == [("hf_trainer", "checkpoint-180")]


def test_trainer_checkpoint_step_tensors_and_tied_head():
    handle = open_hf(RUNS / "stable" / "checkpoint-180")
    assert handle.info.step == 180  # trainer_state.json global_step
    assert handle.info.format == "hf_trainer" and handle.info.has_optimizer and handle.info.has_rng
    names = handle.tensor_names()
    assert len(names) == 28 and "lm_head.weight" not in names and names == sorted(names)
    stored = load_file(RUNS / "stable" / "checkpoint-180" / "model.safetensors")
    for name in names:
        assert torch.equal(handle.load_tensor(name), stored[name])
    # the tied output head is the token embedding, stored once
    assert torch.equal(handle.load_tensor("lm_head.weight"), stored["transformer.wte.weight"])
    assert any("tied" in note for note in handle.audit().notes)
    assert handle.partial == []
    handle.close()


@pytest.mark.parametrize(
    "checkpoint", FIXTURE_CHECKPOINTS, ids=lambda p: f"{p.parent.name}/{p.name}"
)
def test_optimizer_mapping_matches_the_trainer_grouping_of_the_built_model(checkpoint):
    from transformers import GPT2Config, GPT2LMHeadModel

    model = GPT2LMHeadModel(GPT2Config.from_pretrained(checkpoint))
    expected = trainer_id_to_name(model)
    shapes = {n: tuple(p.shape) for n, p in model.named_parameters()}
    raw = torch.load(checkpoint / "optimizer.pt", weights_only=True)
    state = open_hf(checkpoint).optimizer_state()
    assert state is not None and state.unmapped == []
    assert set(state.per_param) == set(expected.values())
    for param_id, name in expected.items():
        entry = state.per_param[name]
        assert tuple(entry["exp_avg"].shape) == shapes[name]  # each moment on its parameter
        assert identical(entry["exp_avg"], raw["state"][param_id]["exp_avg"])
        assert identical(entry["exp_avg_sq"], raw["state"][param_id]["exp_avg_sq"])
        assert entry["step"] == float(raw["state"][param_id]["step"])
    groups = raw["param_groups"]
    assert all(
        state.group_of[expected[i]] == g for g, grp in enumerate(groups) for i in grp["params"]
    )
    assert [g["weight_decay"] for g in state.param_groups] == [0.01, 0.0]
    assert all("params" not in g for g in state.param_groups)


def test_names_alone_give_the_same_mapping_without_transformers(monkeypatch):
    """The fallback when transformers is not installed: registration order from module names."""
    monkeypatch.setattr(param_order, "architecture_order", lambda config, params: None)
    monkeypatch.setattr(
        "tscope.ingest.checkpoints.weights_folder.architecture_order", lambda c, p: None
    )
    checkpoint = RUNS / "lr_jump" / "checkpoint-180"
    from transformers import GPT2Config, GPT2LMHeadModel

    expected = trainer_id_to_name(GPT2LMHeadModel(GPT2Config.from_pretrained(checkpoint)))
    raw = torch.load(checkpoint / "optimizer.pt", weights_only=True)
    handle = open_hf(checkpoint)
    state = handle.optimizer_state()
    assert state is not None and state.unmapped == []
    for param_id, name in expected.items():
        assert torch.equal(state.per_param[name]["exp_avg"], raw["state"][param_id]["exp_avg"])
    assert any("inferred from names" in note for note in handle.audit().notes)


TINY_LLAMA = {
    "hidden_size": 16,
    "intermediate_size": 32,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "num_key_value_heads": 1,
    "vocab_size": 64,
    "max_position_embeddings": 32,
    "pad_token_id": 0,
    "bos_token_id": 0,
    "eos_token_id": 0,
}


def test_sharded_safetensors_and_legacy_bin_written_by_transformers(tmp_path):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(LlamaConfig(**TINY_LLAMA, tie_word_embeddings=False))
    expected = trainer_id_to_name(model)
    groups = _trainer_groups(model)
    optimizer = torch.optim.AdamW(groups, lr=1e-3)
    model(
        input_ids=torch.randint(0, 64, (2, 8)), labels=torch.randint(0, 64, (2, 8))
    ).loss.backward()
    optimizer.step()
    sharded, legacy = tmp_path / "run" / "checkpoint-1", tmp_path / "run" / "checkpoint-2"
    model.save_pretrained(sharded, max_shard_size="20KB")  # model-0000i-of-0000N.safetensors
    # transformers < 4.35 wrote torch.save(state_dict) as pytorch_model.bin; v5 cannot any more
    legacy.mkdir()
    shutil.copy(sharded / "config.json", legacy / "config.json")
    torch.save(model.state_dict(), legacy / "pytorch_model.bin")
    for folder in (sharded, legacy):
        torch.save(optimizer.state_dict(), folder / "optimizer.pt")
        handle = open_hf(folder)
        assert handle.partial == []
        assert set(handle.tensor_names()) == {n for n, _ in model.named_parameters()}
        state = handle.optimizer_state()
        assert state is not None and state.unmapped == []
        raw = optimizer.state_dict()["state"]
        for param_id, name in expected.items():
            assert torch.equal(state.per_param[name]["exp_avg"], raw[param_id]["exp_avg"])
    assert len(list((tmp_path / "run" / "checkpoint-1").glob("model-*-of-*.safetensors"))) > 1
    index = json.loads(
        (tmp_path / "run" / "checkpoint-1" / "model.safetensors.index.json").read_text()
    )
    shard = sorted(set(index["weight_map"].values()))[0]
    (tmp_path / "run" / "checkpoint-1" / shard).unlink()  # a shard lost in a copy
    handle = open_hf(tmp_path / "run" / "checkpoint-1")
    assert [p.problem for p in handle.partial] == ["shard listed in the index is missing"]
    state = handle.optimizer_state()
    assert state is not None and state.per_param == {} and "not mapped" in state.unmapped[0]


def _trainer_groups(model: torch.nn.Module) -> list[dict[str, object]]:
    from transformers import Trainer

    decay = set(Trainer.get_decay_parameter_names(None, model))
    named = list(model.named_parameters())
    return [
        {"params": [p for n, p in named if n in decay], "weight_decay": 0.01},
        {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0},
    ]


# --- resume audit --------------------------------------------------------------------------------


def test_audit_of_a_complete_checkpoint_and_of_one_missing_its_scheduler():
    complete = open_hf(RUNS / "stable" / "checkpoint-120").audit()
    assert complete.missing() == []
    assert complete.rng_ranks == (0,) and complete.expected_ranks == 1
    assert complete.has_scaler is None and complete.has_sampler_state is None
    assert any("saves no sampler state" in note for note in complete.notes)
    assert any("group 0" in n and "10 of 10" in n and "step 120" in n for n in complete.notes)
    no_scheduler = open_hf(RUNS / "resumed_lr_restart" / "checkpoint-120").audit()
    assert no_scheduler.missing() == ["LR scheduler state"]
    # the resumed process restarted AdamW: its checkpoint-180 counts 60 steps, not 180
    restarted = open_hf(RUNS / "resumed_lr_restart" / "checkpoint-180")
    state = restarted.optimizer_state()
    assert state is not None
    assert {v["step"] for v in state.per_param.values()} == {60.0}
    assert restarted.info.step == 180


def test_audit_counts_rng_files_per_rank_and_expects_a_scaler_when_fp16_shows(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(RUNS / "stable" / "checkpoint-120", run / "checkpoint-120")
    shutil.copytree(RUNS / "stable" / "checkpoint-180", run / "checkpoint-180")
    folder = run / "checkpoint-120"
    (folder / "training_args.bin").unlink()  # no world size recorded: count the rank files
    (folder / "rng_state.pth").rename(folder / "rng_state_0.pth")
    shutil.copy(folder / "rng_state_0.pth", folder / "rng_state_2.pth")
    torch.save({"scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5,
                "growth_interval": 2000, "_growth_tracker": 7}, run / "checkpoint-180" / "scaler.pt")  # fmt: skip
    audit = HfTrainerReader(run).open(folder, "ckpt", OPTIONS).audit()  # run/ is the input
    assert audit.rng_ranks == (0, 2) and audit.expected_ranks == 3
    assert "RNG state for 1 of 3 ranks" in audit.missing()
    assert audit.has_scaler is False and "GradScaler state" in audit.missing()
    assert open_hf(run / "checkpoint-180").audit().has_scaler is True


def test_training_args_are_recovered_as_plain_data():
    handle = open_hf(RUNS / "stable" / "checkpoint-120")
    args = handle.training_args
    assert args is not None
    assert args["learning_rate"] == 0.003 and args["logging_steps"] == 1
    assert args["fp16"] is False and args["lr_scheduler_type"] == "cosine"
    assert args["distributed_state"]["num_processes"] == 1


# --- nanoGPT -------------------------------------------------------------------------------------


def write_nanogpt_checkpoint(path: Path, *, compiled: bool) -> tuple[torch.nn.Module, dict]:  # type: ignore[type-arg]
    """The demo's nanoGPT model and checkpoint dict (tscope/demo/train.py), one AdamW step."""
    from tscope.demo.tiny_gpt import TinyGPT, TinyGPTConfig, optimizer_groups

    torch.manual_seed(0)
    config = TinyGPTConfig(vocab_size=32, block_size=8, n_layer=2, n_head=2, n_embd=16, bias=True)
    model = TinyGPT(config)
    optimizer = torch.optim.AdamW(optimizer_groups(model, 0.1), lr=1e-3)
    idx = torch.randint(0, 32, (2, 8))
    _, loss = model(idx, idx)
    loss.backward()
    optimizer.step()
    state_dict = model.state_dict()
    if compiled:  # torch.compile'd models save their keys under _orig_mod.
        state_dict = {f"_orig_mod.{k}": v for k, v in state_dict.items()}
    checkpoint = {
        "model": state_dict,
        "optimizer": optimizer.state_dict(),
        "model_args": config.to_model_args(),
        "iter_num": 1,
        "best_val_loss": 9.0,
        "config": {"dtype": "float16", "learning_rate": 1e-3},
    }
    torch.save(checkpoint, path)
    return model, checkpoint


def test_nanogpt_checkpoint_names_steps_and_optimizer_groups(tmp_path):
    model, checkpoint = write_nanogpt_checkpoint(tmp_path / "ckpt.pt", compiled=True)
    reader = NanoGptReader()
    assert reader.can_open(tmp_path / "ckpt.pt")
    handle = reader.open(tmp_path / "ckpt.pt", "ckpt.pt", OPTIONS)
    assert handle.info.step == 1 and handle.info.format == "nanogpt"
    named = dict(model.named_parameters())  # tied lm_head appears once, as transformer.wte
    assert handle.tensor_names() == sorted(named)
    assert torch.equal(handle.load_tensor("lm_head.weight"), named["transformer.wte.weight"])
    state = handle.optimizer_state()
    assert state is not None and state.unmapped == []
    ordered = [n for n, p in named.items() if p.dim() >= 2] + [
        n for n, p in named.items() if p.dim() < 2
    ]
    raw = checkpoint["optimizer"]["state"]
    for param_id, name in enumerate(ordered):
        assert torch.equal(state.per_param[name]["exp_avg"], raw[param_id]["exp_avg"])
    audit = handle.audit()
    assert audit.missing() == ["GradScaler state", "RNG state"]  # float16 run, no RNG saved
    assert audit.has_scheduler is True  # the LR is a function of iter_num
    assert find_checkpoints(tmp_path)[0][0].name == "nanogpt"
    # --no-weights describes it from the pickle's keys alone, as opening it does
    assert NanoGptReader().describe(tmp_path / "ckpt.pt", "ckpt.pt") == handle.info


# --- plain state-dict files ----------------------------------------------------------------------


def test_plain_state_dict_files_in_a_folder(tmp_path):
    layer = torch.nn.Linear(4, 3)
    weights = {k: v.detach().clone() for k, v in layer.state_dict().items()}
    save_file(weights, tmp_path / "step_1000.safetensors", metadata={"step": "1000"})
    torch.save(weights, tmp_path / "model_500.pt")
    optimizer = torch.optim.AdamW(layer.parameters())
    layer(torch.ones(1, 4)).sum().backward()
    optimizer.step()
    torch.save({"model": weights, "optimizer": optimizer.state_dict(), "step": 200},
               tmp_path / "epoch=1-step=200.bin")  # fmt: skip
    (tmp_path / "notes_7.txt").write_text("not a checkpoint")
    found = find_checkpoints(tmp_path)
    assert [(r.name, shown) for r, _, shown in found] == [
        ("state_dict", "epoch=1-step=200.bin"),
        ("state_dict", "model_500.pt"),
        ("state_dict", "step_1000.safetensors"),
    ]
    handles = [reader.open(path, shown, OPTIONS) for reader, path, shown in found]
    assert [h.info.step for h in handles] == [200, 500, 1000]
    assert [r.describe(p, s) for r, p, s in found] == [h.info for h in handles]
    for handle in handles:
        assert handle.tensor_names() == ["bias", "weight"]
        assert torch.equal(handle.load_tensor("weight"), weights["weight"])
    wrapped = handles[0].optimizer_state()
    assert wrapped is not None and set(wrapped.per_param) == {"weight", "bias"}
    assert handles[0].audit().has_optimizer_moments
    flat = handles[1].audit()
    assert handles[1].optimizer_state() is None
    assert "optimizer moments (exp_avg, exp_avg_sq)" in flat.missing()


@pytest.mark.parametrize(
    ("name", "step"),
    [("step_1000.safetensors", 1000), ("model_500.pt", 500), ("epoch=1-step=200.bin", 200),
     ("ckpt_000100.pt", 100), ("global_step30", 30), ("checkpoint-120", 120), ("iter_7.pth", 7),
     ("model.safetensors", None), ("consolidated.00.pth", None)],
)  # fmt: skip
def test_steps_from_names(name, step):
    assert step_from_name(name) == step


def test_a_claimed_folder_is_one_checkpoint_and_an_output_dir_is_not_claimed(tmp_path):
    out = tmp_path / "out"
    shutil.copytree(RUNS / "stable" / "checkpoint-120", out / "checkpoint-120")
    torch.save(
        {"w": torch.zeros(2)}, out / "checkpoint-120" / "extra_step_5.pt"
    )  # inside: not separate
    # the Trainer's output_dir with a final model and trainer_state.json from save_state()
    shutil.copy(out / "checkpoint-120" / "model.safetensors", out / "model.safetensors")
    shutil.copy(out / "checkpoint-120" / "trainer_state.json", out / "trainer_state.json")
    found = find_checkpoints(out)
    assert [(r.name, shown) for r, _, shown in found] == [("hf_trainer", "checkpoint-120")]


@pytest.mark.parametrize("reader", CHECKPOINT_READERS, ids=lambda r: r.name)
def test_every_reader_declines_what_is_not_its_layout(reader, tmp_path):
    (tmp_path / "step_3.pt").write_text("plain text, not a torch file")
    (tmp_path / "empty").mkdir()
    assert reader.name and isinstance(reader.name, str)
    assert not reader.can_open(tmp_path / "step_3.pt")
    assert not reader.can_open(tmp_path / "empty")
    assert not reader.can_open(RUNS / "stable" / "manifest.json")


def test_a_torch_file_that_holds_no_state_dict_is_unreadable_input(tmp_path):
    torch.save([1, 2, 3], tmp_path / "step_10.pt")
    with pytest.raises(UnreadableInput, match="holds a list, not a state dict"):
        StateDictFileReader().open(tmp_path / "step_10.pt", "step_10.pt", OPTIONS)
