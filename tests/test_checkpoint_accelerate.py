"""accelerate's `Accelerator.save_state` folders, read from files the real accelerate wrote.

fixtures/data/layouts/accelerate*/ (fixtures/layout_accelerate.py): the tiny layout model trained
6 updates on CPU and saved every 2, healthy with automatic_checkpoint_naming (`checkpoint_0..2`:
save counters) and with the LR ×20 from update 5 into `step_{N}/` folders. manifest.json holds
what the live run had when it saved (tensors, the optimizer's LR).
"""

from __future__ import annotations

import json
import math
import shutil
from pathlib import Path

import pytest
import torch

from tscope.ingest.checkpoints.accelerate import AccelerateReader
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.registry import find_checkpoints
from tscope.pipeline import analyze_run

LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layouts"
HEALTHY, JUMP = LAYOUTS / "accelerate", LAYOUTS / "accelerate_lr_jump"
PARAMETERS = {
    "emb.weight", "norm.weight", "norm.bias", "mlp.0.weight", "mlp.0.bias", "mlp.2.weight",
    "mlp.2.bias", "head.weight", "head.bias",
}  # fmt: skip
FOLDERS = [
    (HEALTHY / "checkpoints" / f"checkpoint_{index}", step) for index, step in enumerate((2, 4, 6))
] + [(JUMP / f"step_{step}", step) for step in (2, 4, 6)]


def manifest(layout: Path, step: int) -> dict:
    return json.loads((layout / "manifest.json").read_text())["checkpoints"][str(step)]


def test_the_registry_claims_each_save_state_folder_in_the_optimizers_step_order():
    for layout, shown in ((HEALTHY, "checkpoints/checkpoint_"), (JUMP, "step_")):
        found = find_checkpoints(layout)
        assert [reader.name for reader, _, _ in found] == ["accelerate"] * 3
        assert [s for _, _, s in found] == [
            f"{shown}{i}" for i in ((0, 1, 2) if layout == HEALTHY else (2, 4, 6))
        ]


@pytest.mark.parametrize("folder,step", FOLDERS, ids=lambda v: getattr(v, "name", str(v)))
def test_weights_and_step_are_what_accelerate_saved(folder, step):
    truth = manifest(folder.parent if folder.parent.name != "checkpoints" else HEALTHY, step)
    reader = AccelerateReader()
    assert reader.can_open(folder)
    handle = reader.open(folder, folder.name, LoadOptions())
    try:
        # automatic naming's checkpoint_1 is the second save: the step is the optimizer's 4
        assert handle.info.step == step == truth["step"]
        assert reader.describe(folder, folder.name) == handle.info
        assert handle.partial == []
        # pos_scale, a float buffer beside the parameters, has no optimizer entry of its shape
        assert set(handle.tensor_names()) == PARAMETERS
        for name in handle.tensor_names():
            expected = truth["tensors"][name]
            tensor = handle.load_tensor(name).float().flatten()
            assert math.isclose(
                float(tensor.double().sum()), expected["sum"], rel_tol=1e-6, abs_tol=1e-9
            ), name
        state = handle.optimizer_state()
        assert state is not None
        assert math.isclose(state.param_groups[0]["lr"], truth["lr"], rel_tol=1e-9)
        # one group from parameters() of a model whose names give no module order, and tensors
        # of equal shape (emb/head, the 16-wide vectors): the moments cannot be named, and say so
        assert state.per_param == {} and "not mapped" in state.unmapped[0]
        audit = handle.audit()
        assert audit.missing() == []
        assert audit.rng_ranks == (0,) and audit.expected_ranks == 1 and audit.has_scheduler
        assert any("not analyzed: pos_scale" in note for note in audit.notes)
    finally:
        handle.close()


def test_a_trainer_or_plain_folder_is_not_claimed(tmp_path):
    plain = tmp_path / "step_2"
    shutil.copytree(JUMP / "step_2", plain)
    (plain / "random_states_0.pkl").unlink()
    assert not AccelerateReader().can_open(plain)  # save_state always writes the RNG file
    trainer = tmp_path / "step_4"
    shutil.copytree(JUMP / "step_4", trainer)
    (trainer / "trainer_state.json").write_text("{}")
    assert not AccelerateReader().can_open(trainer)


def test_the_lr_jump_is_found_from_accelerate_checkpoints_alone():
    case = analyze_run(JUMP).case
    assert case.summary.status == "incident"
    headline = next(f for f in case.findings if f.id == case.summary.headline_finding)
    assert headline.category == "lr_schedule_jump" and headline.step == 4
    assert "between the checkpoints at steps 2" in headline.message


def test_the_healthy_accelerate_run_gets_no_warning():
    case = analyze_run(HEALTHY).case
    assert case.summary.status == "healthy"
    assert [f for f in case.findings if f.severity != "info"] == []
    assert "3 checkpoints (steps 2 to 6)" in case.summary.verdict


def test_a_forged_rng_file_is_one_partial_line_and_the_rest_is_read(tmp_path):
    folder = tmp_path / "step_2"
    shutil.copytree(JUMP / "step_2", folder)
    torch.save({"step": 0, "random_state": (3, [1, 2], None)}, folder / "random_states_0.pkl")
    handle = AccelerateReader().open(folder, "step_2", LoadOptions())
    assert handle.info.step == 2 and not handle.info.has_rng
    assert len(handle.partial) == 1
    assert handle.partial[0].path == "step_2/random_states_0.pkl"
    assert "python random state is not a generator state" in handle.partial[0].problem
    assert set(handle.tensor_names()) == PARAMETERS
    handle.close()


def test_a_pickle_that_would_run_code_is_refused_not_run(tmp_path):
    folder = tmp_path / "step_2"
    shutil.copytree(JUMP / "step_2", folder)
    marker = tmp_path / "ran"

    class Payload:
        def __reduce__(self):
            return (Path.touch, (marker,))

    torch.save({"step": 0, "random_state": Payload()}, folder / "random_states_0.pkl")
    handle = AccelerateReader().open(folder, "step_2", LoadOptions())
    assert not marker.exists()
    assert [p.path for p in handle.partial] == ["step_2/random_states_0.pkl"]
    handle.close()


def test_a_llama_with_the_no_trainer_examples_groups_gets_every_moment_by_name(tmp_path):
    """transformers' *_no_trainer.py groups (`bias`, `layer_norm.weight` substrings: Llama's
    input_layernorm.weight decays, unlike in the Trainer), saved by the real Accelerator."""
    from accelerate import Accelerator
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    model = LlamaForCausalLM(
        LlamaConfig(
            num_hidden_layers=2, hidden_size=16, intermediate_size=32, num_attention_heads=2,
            num_key_value_heads=2, vocab_size=40, max_position_embeddings=16,
        )
    )  # fmt: skip
    no_decay = ["bias", "layer_norm.weight"]
    named = list(model.named_parameters())
    optimizer = torch.optim.AdamW(
        [
            {"params": [p for n, p in named if not any(nd in n for nd in no_decay)]},
            {"params": [p for n, p in named if any(nd in n for nd in no_decay)], "weight_decay": 0},
        ],
        lr=1e-3,
    )
    accelerator = Accelerator(cpu=True)
    model, optimizer = accelerator.prepare(model, optimizer)
    tokens = torch.randint(0, 40, (2, 16))
    for _ in range(2):
        accelerator.backward(model(input_ids=tokens, labels=tokens).loss)
        optimizer.step()
        optimizer.zero_grad()
    accelerator.save_state(str(tmp_path / "step_2"))
    handle = AccelerateReader().open(tmp_path / "step_2", "step_2", LoadOptions())
    state = handle.optimizer_state()
    assert handle.info.step == 2 and state is not None and state.unmapped == []
    live = dict(accelerator.unwrap_model(model).named_parameters())
    assert set(state.per_param) == set(live)
    for name, parameter in live.items():
        kept = optimizer.optimizer.state[parameter]
        assert torch.equal(state.per_param[name]["exp_avg"], kept["exp_avg"]), name
    assert any("no_trainer examples" in note for note in handle.audit().notes)
    handle.close()


def test_a_linked_optimizer_file_is_refused_once_and_the_rest_is_read(tmp_path):
    run = tmp_path / "run"
    shutil.copytree(JUMP / "step_2", run / "step_2")
    outside = tmp_path / "elsewhere.bin"
    shutil.copy(JUMP / "step_4" / "optimizer.bin", outside)
    (run / "step_2" / "optimizer.bin").unlink()
    (run / "step_2" / "optimizer.bin").symlink_to(outside)
    case = analyze_run(run).case
    refused = [p for p in case.partial if p.path == "step_2/optimizer.bin"]
    assert len(refused) == 1 and "symbolic link" in refused[0].problem
    assert [(c.step, c.has_optimizer) for c in case.checkpoints] == [(2, False)]


def test_a_saved_sampler_counts_for_the_resume_and_is_never_unpickled(tmp_path):
    """accelerate saves a SeedableRandomSampler as the pickled object itself (sampler.bin)."""
    from accelerate.data_loader import SeedableRandomSampler

    folder = tmp_path / "step_2"
    shutil.copytree(JUMP / "step_2", folder)
    torch.save(SeedableRandomSampler(range(8)), folder / "sampler.bin")
    handle = AccelerateReader().open(folder, "step_2", LoadOptions())
    assert handle.partial == [] and handle.audit().has_sampler_state is True
    handle.close()


@pytest.mark.parametrize("damage", ["removed", "empty"])
def test_a_middle_checkpoint_without_its_optimizer_is_partial_not_a_crash(tmp_path, damage):
    """The LR-jump run with step_4's optimizer.bin missing (an incomplete save) or empty: the
    update-ratio rule's windows paired step 4 (no LR) with step 6, while the LR jump was known
    only across 2 → 6, and looked up step 4's LR (KeyError; found by a hostile-input review)."""
    run = tmp_path / "run"
    shutil.copytree(JUMP, run)
    optimizer = run / "step_4" / "optimizer.bin"
    optimizer.unlink()
    if damage == "empty":
        optimizer.write_bytes(b"")
    case, _ = analyze_run(str(run))
    assert [c.step for c in case.checkpoints] == [2, 4, 6]
    if damage == "empty":
        assert any("optimizer.bin" in p.path for p in case.partial)
    # No finding says the LR jumped inside the window (4, 6]: it may have jumped in (2, 4].
    for finding in case.findings:
        if finding.category == "update_ratio_high" and finding.step == 6:
            assert "jumped" not in finding.message


def test_forged_param_ids_are_not_mapped_not_a_crash(tmp_path):
    """`param_groups[0]["params"]` holding a list, a dict, a float and None (unhashable or not a
    parameter id) crashed the audit with TypeError (found by a hostile-input review)."""
    folder = tmp_path / "step_2"
    shutil.copytree(JUMP / "step_2", folder)
    optimizer = torch.load(folder / "optimizer.bin", weights_only=True)
    optimizer["param_groups"][0]["params"] = [[1], {"a": 1}, 1.5, None, True]
    torch.save(optimizer, folder / "optimizer.bin")
    handle = AccelerateReader().open(folder, "step_2", LoadOptions())
    try:
        state = handle.optimizer_state()
        assert state is not None and state.per_param == {}
        assert "neither parameter numbers nor names" in state.unmapped[0]
        assert handle.audit().has_scheduler
    finally:
        handle.close()
    case, _ = analyze_run(str(tmp_path))
    assert [c.step for c in case.checkpoints] == [2]
