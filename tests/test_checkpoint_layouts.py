"""Lightning, torch DCP and DeepSpeed (ZeRO-1/2/3) checkpoints, read from files their real producers wrote.

fixtures/data/layouts/<layout>/ holds the producers' files and a manifest.json of what each
producer held in memory when it saved: tensors, and Adam moments and fp32 masters taken from the
live optimizer by parameter name (fixtures/make_checkpoint_layouts.py). A moment read back under
the right name with the producer's values is a mapping that is right, not just plausible.
"""

from __future__ import annotations

import json
import math
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import torch

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import (
    CheckpointHandle,
    CheckpointReader,
    ConfinableReader,
    LoadOptions,
)
from tscope.ingest.checkpoints.dcp import DcpReader
from tscope.ingest.checkpoints.deepspeed import DeepSpeedReader
from tscope.ingest.checkpoints.lightning import LightningReader
from tscope.ingest.checkpoints.registry import find_checkpoints

LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layouts"
OPTIONS = LoadOptions()
PARAMETERS = {
    "emb.weight", "norm.weight", "norm.bias", "mlp.0.weight", "mlp.0.bias", "mlp.2.weight",
    "mlp.2.bias", "head.weight", "head.bias",
}  # fmt: skip
BUFFER = "pos_scale"  # a float buffer registered between emb and norm: no optimizer state
# Every reader tells the buffer from the parameters: DeepSpeed lists buffer_names, Lightning and
# DCP by which entries the optimizer holds. (Listed, it would read as a frozen parameter.)


@dataclass(frozen=True)
class Case:
    reader: CheckpointReader
    path: str  # under LAYOUTS
    manifest_step: str
    names: frozenset[str]  # what tensor_names() must give
    missing: tuple[str, ...]  # ResumeAudit.missing()
    prefix: str = ""  # the producer's own key prefix in the manifest
    masters: bool = False
    claimed: bool = True  # can_open (False: the same checkpoint is claimed in another form)


LIGHTNING_MISSING = ("RNG state", "sampler / dataloader position")
CASES = [
    Case(LightningReader(), "lightning/epoch=0-step=2.ckpt", "2", frozenset(PARAMETERS),
         LIGHTNING_MISSING, prefix="model."),
    Case(LightningReader(), "lightning/epoch=0-step=4.ckpt", "4", frozenset(PARAMETERS),
         LIGHTNING_MISSING, prefix="model."),
    Case(LightningReader(), "lightning/last.ckpt", "4", frozenset(PARAMETERS),
         LIGHTNING_MISSING, prefix="model.", claimed=False),  # repeats epoch=0-step=4.ckpt
    Case(LightningReader(), "lightning_named_groups/epoch=0-step=2.ckpt", "2",
         frozenset(PARAMETERS), LIGHTNING_MISSING, prefix="model."),
    Case(DcpReader(), "dcp_single/step_2", "2", frozenset(PARAMETERS),
         ("LR scheduler state", "RNG state")),
    Case(DcpReader(), "dcp_fsdp2_2ranks/step-4", "4", frozenset(PARAMETERS),
         ("LR scheduler state", "RNG state")),
    Case(DcpReader(), "dcp_accelerate/checkpoint-2", "2", frozenset(PARAMETERS),
         ("RNG state",)),
    Case(DeepSpeedReader(), "deepspeed_zero2_bf16/global_step2", "2", frozenset(PARAMETERS),
         ("RNG state", "sampler / dataloader position"), masters=True),
    Case(DeepSpeedReader(), "deepspeed_zero2_bf16/global_step2_universal", "2",
         frozenset(PARAMETERS), ("RNG state", "sampler / dataloader position"), masters=True,
         claimed=False),
    Case(DeepSpeedReader(), "deepspeed_zero1_2ranks/global_step2", "2", frozenset(PARAMETERS),
         ("LR scheduler state", "RNG state", "sampler / dataloader position"), masters=True),
    # ZeRO-3: the weights are the fp32 masters rebuilt from both ranks' slices of every parameter
    Case(DeepSpeedReader(), "deepspeed_zero3_2ranks/global_step2", "2", frozenset(PARAMETERS),
         ("LR scheduler state", "RNG state", "sampler / dataloader position"), masters=True),
]  # fmt: skip


def manifest(case: Case) -> dict[str, Any]:
    layout = case.path.split("/", 1)[0]
    loaded: dict[str, Any] = json.loads((LAYOUTS / layout / "manifest.json").read_text())
    return loaded["checkpoints"][case.manifest_step]


def bound(case: Case) -> CheckpointReader:
    """The case's reader with the layouts folder as the input (as `tscope analyze` of it reads
    them): the run folder around each checkpoint, with `latest` and its siblings, is inside it."""
    reader = case.reader
    return reader.confined_to(LAYOUTS) if isinstance(reader, ConfinableReader) else reader


def open_case(case: Case) -> CheckpointHandle:
    return bound(case).open(LAYOUTS / case.path, case.path, OPTIONS)


def assert_matches(tensor: torch.Tensor, expected: dict[str, Any], what: str) -> None:
    assert list(tensor.shape) == expected["shape"], what
    flat = tensor.detach().float().flatten()
    assert [float(v) for v in flat[: len(expected["head"])]] == expected["head"], what
    assert math.isclose(float(flat.double().sum()), expected["sum"], rel_tol=1e-6, abs_tol=1e-9)


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.path)
def test_weights_steps_and_names_are_what_the_producer_saved(case):
    truth = manifest(case)
    assert bound(case).can_open(LAYOUTS / case.path) is case.claimed
    handle = open_case(case)
    try:
        assert handle.info.step == truth["step"]
        assert handle.partial == []
        assert set(handle.tensor_names()) == case.names
        assert handle.tensor_names() == sorted(handle.tensor_names())
        for name in handle.tensor_names():
            expected = truth["tensors"][case.prefix + name]
            tensor = handle.load_tensor(name)
            assert str(tensor.dtype).removeprefix("torch.") == expected["dtype"], name
            assert_matches(tensor, expected, name)
        with pytest.raises(UnreadableInput, match="no tensor named"):
            handle.load_tensor("not.a.parameter")
    finally:
        handle.close()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.path)
def test_adam_moments_land_on_the_parameter_the_live_optimizer_kept_them_for(case):
    truth = manifest(case)
    handle = open_case(case)
    state = handle.optimizer_state()
    assert state is not None and state.unmapped == []
    assert set(state.per_param) == PARAMETERS  # the buffer has no state and gets none
    for name, entry in state.per_param.items():
        expected = truth["moments"][case.prefix + name]
        for slot in ("exp_avg", "exp_avg_sq"):
            assert_matches(entry[slot], expected[slot], f"{name}.{slot}")
        assert entry["step"] == float(truth["step"])
        assert list(entry["exp_avg"].shape) == list(handle.load_tensor(name).shape)
    assert set(state.group_of) == PARAMETERS
    assert all(group["eps"] == 1e-8 for group in state.param_groups)
    if case.masters:
        assert state.master_weights is not None
        for name in PARAMETERS:
            master = state.master_weights[name]
            assert master.dtype == torch.float32
            assert_matches(master, truth["master"][name], f"master {name}")
    handle.close()


@pytest.mark.parametrize("case", CASES, ids=lambda c: c.path)
def test_the_resume_audit_names_what_each_layout_leaves_out(case):
    handle = open_case(case)
    audit = handle.audit()
    assert tuple(audit.missing()) == case.missing
    assert audit.has_weights and audit.has_optimizer_moments and audit.has_step_counters
    assert handle.info.has_optimizer and not handle.info.has_rng
    handle.close()


def test_lightning_keeps_the_scaler_under_the_precision_plugin_and_says_what_it_lacks():
    fp16 = open_case(CASES[0]).audit()
    assert fp16.has_scaler is True  # MixedPrecision: GradScaler state
    assert fp16.has_sampler_state is False and fp16.rng_ranks == ()
    assert any("no global RNG" in note for note in fp16.notes)
    bf16 = open_case(CASES[3]).audit()
    assert bf16.has_scaler is None  # bf16-mixed has no scaler to lose


def test_lightning_param_names_give_the_decay_groups():
    state = open_case(CASES[3]).optimizer_state()
    assert state is not None
    decayed = {"emb.weight", "mlp.0.weight", "mlp.2.weight", "head.weight"}
    assert {n for n, g in state.group_of.items() if g == 0} == decayed
    assert [g["weight_decay"] for g in state.param_groups] == [0.1, 0.0]


def test_lightning_buffer_that_fits_two_ways_leaves_the_state_unmapped(tmp_path):
    """An extra (16,) buffer right after norm.bias: shapes cannot say which one is the parameter."""
    raw = torch.load(LAYOUTS / "lightning" / "epoch=0-step=2.ckpt", weights_only=True)
    items = list(raw["state_dict"].items())
    at = [k for k, _ in items].index("model.norm.bias") + 1
    items.insert(at, ("model.norm.running_bias", torch.ones(16)))
    raw["state_dict"] = dict(items)
    torch.save(raw, tmp_path / "epoch=0-step=2.ckpt")
    handle = LightningReader().open(tmp_path / "epoch=0-step=2.ckpt", "x.ckpt", OPTIONS)
    state = handle.optimizer_state()
    assert state is not None and state.per_param == {}
    assert "not mapped" in state.unmapped[0] and "9 optimizer state entries" in state.unmapped[0]
    # without a mapping, nothing tells buffers from parameters: every tensor is listed
    assert {BUFFER, "norm.running_bias"} <= set(handle.tensor_names())


def test_lightning_with_two_optimizers_and_no_param_names_reports_them_unmapped(tmp_path):
    raw = torch.load(LAYOUTS / "lightning" / "epoch=0-step=2.ckpt", weights_only=True)
    raw["optimizer_states"] = raw["optimizer_states"] * 2
    torch.save(raw, tmp_path / "gan.ckpt")
    state = LightningReader().open(tmp_path / "gan.ckpt", "gan.ckpt", OPTIONS).optimizer_state()
    assert state is not None and state.per_param == {}
    assert len(state.unmapped) == 2 and "user code" in state.unmapped[0]


def test_my_zero_partition_rebuild_equals_deepspeeds_own_universal_conversion():
    ours = open_case(CASES[7]).optimizer_state()
    theirs = open_case(CASES[8]).optimizer_state()
    assert ours is not None and theirs is not None
    for name in PARAMETERS:
        for slot in ("exp_avg", "exp_avg_sq"):
            assert torch.equal(ours.per_param[name][slot], theirs.per_param[name][slot]), name
        assert torch.equal(ours.master_weights[name], theirs.master_weights[name])  # type: ignore[index]


def test_a_universal_checkpoint_alone_is_claimed_and_without_model_file_reads_fp32(tmp_path):
    universal = tmp_path / "global_step2_universal"
    shutil.copytree(LAYOUTS / "deepspeed_zero2_bf16" / "global_step2_universal", universal)
    assert DeepSpeedReader().can_open(universal)
    (universal / "mp_rank_00_model_states.pt").unlink()  # Megatron conversions may lack it
    handle = DeepSpeedReader().open(universal, "global_step2_universal", OPTIONS)
    truth = manifest(CASES[8])
    assert handle.info.step == 2 and handle.info.format == "deepspeed_universal"
    weight = handle.load_tensor("mlp.0.weight")
    assert weight.dtype == torch.float32  # the fp32 master stands in for the weights
    assert_matches(weight, truth["master"]["mlp.0.weight"], "fp32 as weights")
    assert BUFFER in handle.tensor_names()  # without buffer_names, a buffer cannot be told apart


def test_dcp_in_a_trainer_folder_takes_the_step_and_rng_files_from_its_siblings(tmp_path):
    checkpoint = copy_layout("dcp_accelerate", tmp_path) / "checkpoint-2"
    (checkpoint / "trainer_state.json").write_text(json.dumps({"global_step": 2000}))
    for rank in (0, 1):  # the Trainer's per-rank RNG files (the audit only needs their names)
        torch.save({"cpu": torch.get_rng_state()}, checkpoint / f"rng_state_{rank}.pth")
    handle = DcpReader().open(checkpoint, "checkpoint-2", OPTIONS)
    assert handle.info.step == 2000 and handle.info.has_rng
    audit = handle.audit()
    assert audit.rng_ranks == (0, 1) and audit.missing() == []
    assert "step from the trainer_state.json" in audit.notes


def test_deepspeed_audit_says_when_latest_names_another_tag(tmp_path):
    run = copy_layout("deepspeed_zero1_2ranks", tmp_path)
    reader = DeepSpeedReader(run)  # the run folder, holding `latest`, is the input
    assert not any(
        "latest" in n for n in reader.open(run / "global_step2", "t", OPTIONS).audit().notes
    )
    (run / "latest").write_text("global_step9")
    notes = reader.open(run / "global_step2", "t", OPTIONS).audit().notes
    assert "`latest` names global_step9: a resume without a tag loads that one" in notes


def test_deepspeed_overflow_skips_go_into_the_audit_notes(tmp_path):
    run = copy_layout("deepspeed_zero2_bf16", tmp_path)
    states = run / "global_step2" / "mp_rank_00_model_states.pt"
    raw = torch.load(states, weights_only=True)
    raw["skipped_steps"] = 3
    torch.save(raw, states)
    audit = DeepSpeedReader().open(run / "global_step2", "global_step2", OPTIONS).audit()
    assert any("skipped 3 optimizer step(s) of 2 on fp16 overflow" in n for n in audit.notes)


def test_deepspeed_without_slice_mappings_packs_one_rank_in_order_and_refuses_two(tmp_path):
    from tscope.ingest.checkpoints.deepspeed_zero import rebuild_zero_state

    def plain(file: Path) -> dict[str, Any]:
        from tscope.ingest.checkpoints.deepspeed_pickle import load_deepspeed_file

        inner = dict(load_deepspeed_file(file, file.name, OPTIONS)["optimizer_state_dict"])
        del inner["param_slice_mappings"]  # DeepSpeed before 0.10 did not write them
        return inner

    one = LAYOUTS / "deepspeed_zero2_bf16" / "global_step2"
    shapes = torch.load(one / "mp_rank_00_model_states.pt", weights_only=True)["param_shapes"]
    rebuilt = rebuild_zero_state(
        [plain(one / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt")], shapes
    )
    reference = open_case(CASES[7]).optimizer_state()
    assert reference is not None and rebuilt.unmapped == []
    assert torch.equal(
        rebuilt.moments["mlp.2.weight"]["exp_avg"], reference.per_param["mlp.2.weight"]["exp_avg"]
    )
    two = LAYOUTS / "deepspeed_zero1_2ranks" / "global_step2"
    ranks = [plain(two / f"zero_pp_rank_{r}_mp_rank_00_optim_states.pt") for r in (0, 1)]
    rebuilt = rebuild_zero_state(ranks, shapes)
    assert rebuilt.moments == {} and "no param_slice_mappings and 2 ranks" in rebuilt.unmapped[0]


def test_the_registry_finds_each_checkpoint_once():
    found = [(reader.name, shown) for reader, _, shown in find_checkpoints(LAYOUTS)]
    assert sorted(found) == sorted([
        ("torch_dcp", "dcp_accelerate/checkpoint-2"),
        ("torch_dcp", "dcp_single/step_2"),
        ("torch_dcp", "dcp_fsdp2_2ranks/step-4"),
        ("deepspeed", "deepspeed_zero1_2ranks/global_step2"),
        ("deepspeed", "deepspeed_zero3_2ranks/global_step2"),
        ("hf_trainer", "trainer_deepspeed_zero2/checkpoint-2"),
        ("hf_trainer", "trainer_deepspeed_zero2/checkpoint-4"),
        ("hf_trainer", "trainer_deepspeed_zero3/checkpoint-2"),
        ("hf_trainer", "trainer_deepspeed_zero3/checkpoint-4"),
        # global_step2_universal is a conversion of global_step2: the same checkpoint
        ("deepspeed", "deepspeed_zero2_bf16/global_step2"),
        ("lightning", "lightning/epoch=0-step=2.ckpt"),
        ("lightning", "lightning/epoch=0-step=4.ckpt"),  # last.ckpt repeats it: not twice
        ("lightning", "lightning_named_groups/epoch=0-step=2.ckpt"),
        ("accelerate", "accelerate/checkpoints/checkpoint_0"),
        ("accelerate", "accelerate/checkpoints/checkpoint_1"),
        ("accelerate", "accelerate/checkpoints/checkpoint_2"),
        ("accelerate", "accelerate_lr_jump/step_2"),
        ("accelerate", "accelerate_lr_jump/step_4"),
        ("accelerate", "accelerate_lr_jump/step_6"),
    ])  # fmt: skip


@pytest.mark.parametrize("root", [LAYOUTS, LAYOUTS.parent / "trainer" / "corrupted_batch"])
def test_the_inventory_describes_each_checkpoint_as_opening_it_does(root):
    """`--no-weights` lists what the readers find, with the step, layout and state they report."""
    found = find_checkpoints(root)
    assert found
    for reader, path, shown in found:
        handle = reader.open(path, shown, OPTIONS)
        assert reader.describe(path, shown) == handle.info, shown
        handle.close()


def test_a_last_ckpt_past_every_named_checkpoint_is_kept(tmp_path):
    shutil.copy(LAYOUTS / "lightning" / "epoch=0-step=2.ckpt", tmp_path)
    shutil.copy(LAYOUTS / "lightning" / "last.ckpt", tmp_path)  # step 4: the only one there
    found = [shown for _, _, shown in find_checkpoints(tmp_path)]
    assert found == ["epoch=0-step=2.ckpt", "last.ckpt"]


def test_reading_every_layout_writes_nothing_into_the_inputs():
    before = {p: p.stat().st_mtime_ns for p in LAYOUTS.rglob("*")}
    for case in CASES:
        handle = open_case(case)
        handle.audit()
        handle.optimizer_state()
        handle.close()
    assert {p: p.stat().st_mtime_ns for p in LAYOUTS.rglob("*")} == before


def copy_layout(layout: str, tmp_path: Path) -> Path:
    target = tmp_path / layout
    shutil.copytree(LAYOUTS / layout, target)
    return target


def test_zero3_with_a_rank_file_missing_rebuilds_nothing_and_says_why(tmp_path):
    """Every ZeRO-3 parameter is split over all ranks: one rank's file alone holds half of each."""
    root = copy_layout("deepspeed_zero3_2ranks", tmp_path)
    (root / "global_step2" / "zero_pp_rank_1_mp_rank_00_optim_states.pt").unlink()
    handle = DeepSpeedReader().confined_to(root).open(root / "global_step2", "gs2", OPTIONS)
    state = handle.optimizer_state()
    assert state is not None and state.per_param == {}
    assert "over 2 ranks, 1 rank file(s) are here" in state.unmapped[0]
    with pytest.raises(UnreadableInput, match="only in the optimizer files' partitions"):
        handle.load_tensor("emb.weight")
    handle.close()
