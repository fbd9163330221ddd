"""Forged DeepSpeed checkpoints (ZeRO-1/2/3 and the Trainer's tag folders) from strangers.

Each case copies a real fixture (fixtures/data/layouts/deepspeed*), changes one value of its
pickles and saves them back with DeepSpeed's own class names, as a forger would. The rules: the
analysis never raises; what cannot be mapped is said once, with the file it is in; and the
rebuild of a ZeRO partition never builds more than the partitions in the files hold (fragments
that overlap or lie outside their partition are refused before anything is cut from them).
"""

from __future__ import annotations

import json
import math
import shutil
import sys
import types
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import torch

import tscope
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.deepspeed import DeepSpeedReader
from tscope.ingest.checkpoints.deepspeed_pickle import (
    STAND_INS,
    FragmentAddress,
)

LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layouts"
OPTIONS = LoadOptions()
Z1 = "deepspeed_zero1_2ranks"
MODEL = "mp_rank_00_model_states.pt"
Z3_MODEL = "zero_pp_rank_0_mp_rank_00_model_states.pt"
OPTIM = "zero_pp_rank_{}_mp_rank_00_optim_states.pt"
Edit = Callable[[dict[str, Any]], Any]


@contextmanager
def deepspeed_class_names(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """torch.save pickles the stand-ins under DeepSpeed's names (what DeepSpeed itself writes),
    through stand-in modules: nothing of DeepSpeed is imported, and all is undone after."""
    names = [(cls, cls.__module__, cls.__qualname__) for cls, _ in STAND_INS]
    try:
        with monkeypatch.context() as patch:
            for cls, full in STAND_INS:
                module, _, name = full.rpartition(".")
                if module == "argparse":
                    continue  # the fixtures hold no Namespace
                parts = module.split(".")
                for end in range(1, len(parts) + 1):
                    prefix = ".".join(parts[:end])
                    if prefix not in sys.modules:
                        patch.setitem(sys.modules, prefix, types.ModuleType(prefix))
                patch.setattr(sys.modules[module], name, cls, raising=False)
                cls.__module__, cls.__qualname__ = module, name
            yield
    finally:
        for cls, module, qualname in names:
            cls.__module__, cls.__qualname__ = module, qualname


def load(path: Path) -> dict[str, Any]:
    """Read into memory (not memory-mapped: the file is written over next)."""
    with torch.serialization.safe_globals(list(STAND_INS)):
        loaded: dict[str, Any] = torch.load(path, weights_only=True)
    return loaded


def edit(monkeypatch: pytest.MonkeyPatch, path: Path, change: Edit) -> None:
    raw = load(path)
    replaced = change(raw)
    with deepspeed_class_names(monkeypatch):
        torch.save(raw if replaced is None else replaced, path)


def forged(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    layout: str,
    edits: dict[str, Edit],
    tag: str = "global_step2",
) -> Path:
    """A copy of `layout` whose files (by name, inside `tag`) went through `edits`."""
    root = tmp_path / layout
    shutil.copytree(LAYOUTS / layout, root)
    for name, change in edits.items():
        edit(monkeypatch, root / tag / name, change)
    return root


def case_text(root: Path) -> tuple[dict[str, Any], str]:
    """The case of `root` (analyzing it must not raise) as JSON, and as one string to search."""
    payload = tscope.analyze(root).to_dict()
    return payload, json.dumps(payload)


def setter(*keys: Any, value: Any) -> Edit:
    def change(raw: dict[str, Any]) -> None:
        target = raw
        for key in keys[:-1]:
            target = target[key]
        target[keys[-1]] = value

    return change


def opt(*keys: Any, value: Any) -> Edit:
    return setter("optimizer_state_dict", *keys, value=value)


def fragment(name: str, numel: Any, start: Any) -> Edit:
    def change(raw: dict[str, Any]) -> None:
        address = FragmentAddress(0, 0)
        address.numel, address.start = numel, start
        raw["optimizer_state_dict"]["param_slice_mappings"][0][name] = address

    return change


def rename_in_shapes(raw: dict[str, Any]) -> None:
    shapes = raw["param_shapes"][0]
    shapes[7] = shapes.pop("emb.weight")


def rename_in_mappings(raw: dict[str, Any]) -> None:
    mappings = raw["optimizer_state_dict"]["param_slice_mappings"][0]
    mappings[7] = mappings.pop("emb.weight")


def flat_2d(raw: dict[str, Any]) -> None:
    groups = raw["optimizer_state_dict"]["single_partition_of_fp32_groups"]
    groups[0] = groups[0].reshape(8, -1)


def optimizer_of(root: Path, tag: str = "global_step2") -> Any:
    handle = DeepSpeedReader().confined_to(root).open(root / tag, tag, OPTIONS)
    try:
        return handle.optimizer_state()
    finally:
        handle.close()


# --- ZeRO-1/2 fragments that overlap or leave their partition --------------------------------


def test_fragments_that_overlap_are_refused_not_copied_once_per_name(tmp_path, monkeypatch):
    """Every parameter's fragment covers each rank's whole partition: rebuilt, each would be a
    copy of both partitions (memory = names x partitions from files of one partition each)."""
    names = [f"layer{i}.weight" for i in range(40)]
    size = 1000

    def model(raw: dict[str, Any]) -> None:
        shared = torch.randn(2 * size)  # one storage in the file, however many names
        raw["module"] = OrderedDict((name, shared) for name in names)
        raw["param_shapes"] = [OrderedDict((name, torch.Size([2 * size])) for name in names)]
        raw["buffer_names"] = []

    def rank(raw: dict[str, Any]) -> None:
        inner = raw["optimizer_state_dict"]
        inner["single_partition_of_fp32_groups"] = [torch.randn(size)]
        moments = inner["base_optimizer_state"]["state"][0]
        moments["exp_avg"], moments["exp_avg_sq"] = torch.randn(size), torch.rand(size)
        inner["param_slice_mappings"] = [
            OrderedDict((name, FragmentAddress(size, 0)) for name in names)
        ]

    root = forged(
        tmp_path, monkeypatch, Z1, {MODEL: model, OPTIM.format(0): rank, OPTIM.format(1): rank}
    )
    state = optimizer_of(root)
    assert state.master_weights is None and state.per_param == {}  # nothing was cut
    assert "overlap in the partition; not mapped" in state.unmapped[0]
    assert f"global_step2/{OPTIM.format(0)}" in state.unmapped[0]
    _, text = case_text(root)
    assert "overlap in the partition; not mapped" in text


@pytest.mark.parametrize(
    ("numel", "start", "said"),
    [
        (512, -1096, "(start -1096, 512 values) lies outside"),  # narrow() would wrap it
        (512, 10**12, "lies outside its 1608-value partition"),
        (528, -16, "lies outside"),
        (-5, 0, "lies outside"),
        (512, 0.5, "not a (start, numel) of whole numbers"),
        (float("nan"), 0, "not a (start, numel) of whole numbers"),
    ],
)
def test_a_fragment_outside_its_partition_refuses_the_group(
    tmp_path, monkeypatch, numel, start, said
):
    root = forged(
        tmp_path, monkeypatch, Z1, {OPTIM.format(0): fragment("emb.weight", numel, start)}
    )
    state = optimizer_of(root)
    assert state.master_weights is None and state.per_param == {}
    assert said in state.unmapped[0] and OPTIM.format(0) in state.unmapped[0]
    _, text = case_text(root)
    assert said in text


# --- forged structures: each becomes a note, never a traceback -------------------------------

ZERO1_FORGERIES: dict[str, tuple[dict[str, Edit], str]] = {
    "state a list": (
        {OPTIM.format(0): opt("base_optimizer_state", "state", value=[1, 2])},
        "",
    ),
    "moments a list": (
        {OPTIM.format(0): opt("base_optimizer_state", "state", 0, value=[1, 2])},
        "the optimizer state is a list: its Adam moments are not mapped",
    ),
    "moments a tensor": (
        {OPTIM.format(0): opt("base_optimizer_state", "state", 0, value=torch.zeros(3))},
        "the optimizer state is a Tensor: its Adam moments are not mapped",
    ),
    "exp_avg an int": (
        {OPTIM.format(0): opt("base_optimizer_state", "state", 0, "exp_avg", value=5)},
        "exp_avg is not a flat tensor of the partition's size",
    ),
    "step a list": (
        {OPTIM.format(0): opt("base_optimizer_state", "state", 0, "step", value=[1, 2])},
        "",
    ),
    "fragment an int": (
        {OPTIM.format(0): opt("param_slice_mappings", 0, "emb.weight", value=512)},
        "the fragment of emb.weight is not a (start, numel) of whole numbers; not mapped",
    ),
    "mappings a list": (
        {OPTIM.format(0): opt("param_slice_mappings", 0, value=["emb.weight"])},
        "param_slice_mappings holds a list, not parameter names and fragments; not mapped",
    ),
    "fp32 partition an int": (
        {OPTIM.format(0): opt("single_partition_of_fp32_groups", 0, value=7)},
        "the fp32 partition is not a flat floating-point tensor; not mapped",
    ),
    "fp32 partition 2-D": (
        {OPTIM.format(0): flat_2d},
        "the fp32 partition is not a flat floating-point tensor; not mapped",
    ),
    "param_shapes a list": (
        {MODEL: setter("param_shapes", value=[[1, 2]])},
        "param_shapes holds a list, not parameter names and shapes; not mapped",
    ),
    "shape a string": (
        {MODEL: setter("param_shapes", 0, "emb.weight", value="abc")},
        "the shape of emb.weight is not a list of sizes (group 0); not mapped",
    ),
    "shape an int": (
        {MODEL: setter("param_shapes", 0, "emb.weight", value=5)},
        "the shape of emb.weight is not a list of sizes (group 0); not mapped",
    ),
    "a parameter named by an int": (
        {MODEL: rename_in_shapes, OPTIM.format(0): rename_in_mappings},
        "param_shapes names a parameter by a int, not a string (group 0); not mapped",
    ),
    "buffer_names an int": (
        {MODEL: setter("buffer_names", value=5)},
        "buffer_names is not a list of names",
    ),
    "buffer_names unhashable": (
        {MODEL: setter("buffer_names", value=[[1], {}])},
        "buffer_names is not a list of names: its 2 other entries are ignored",
    ),
    "fp16.enabled a tensor": (
        {MODEL: setter("ds_config", "fp16", value={"enabled": torch.zeros(2)})},
        "",
    ),
}


@pytest.mark.parametrize("forgery", sorted(ZERO1_FORGERIES))
def test_forged_zero1_structures_are_notes_not_tracebacks(tmp_path, monkeypatch, forgery):
    edits, said = ZERO1_FORGERIES[forgery]
    root = forged(tmp_path, monkeypatch, Z1, edits)
    payload, text = case_text(root)
    assert said in text
    # the model file's weights are still analyzed
    assert "mlp.0.weight" in payload["layers"]["names"]


def test_a_forged_group_keeps_the_other_parameters_of_the_group(tmp_path, monkeypatch):
    root = forged(
        tmp_path, monkeypatch, Z1, {MODEL: setter("param_shapes", 0, "emb.weight", value="abc")}
    )
    state = optimizer_of(root)
    assert "emb.weight" not in state.per_param and "mlp.0.weight" in state.per_param
    assert state.per_param["mlp.0.weight"]["exp_avg"].shape == (64, 16)


TRAINER_Z3 = "trainer_deepspeed_zero3"  # one rank; the Trainer's logs beside the tag folder
TRAINER_TAG = "checkpoint-4/global_step4"
WTE = "transformer.wte.weight"
ZERO3_FORGERIES: dict[str, tuple[dict[str, Edit], str]] = {
    "partition_count a list": (
        {OPTIM.format(0): opt("partition_count", value=[1])},
        "do not record one number of ranks (partition_count)",
    ),
    "negative shape": (
        {Z3_MODEL: setter("param_shapes", 0, WTE, value=[-32, -16])},
        f"the shape of {WTE} is not a list of sizes; not mapped",
    ),
    "NaN shape": (
        {Z3_MODEL: setter("param_shapes", 0, WTE, value=[math.nan])},
        f"the shape of {WTE} is not a list of sizes; not mapped",
    ),
    "fp32 group an int": (
        {OPTIM.format(0): opt("fp32_flat_groups", 0, value=7)},
        "the fp32 partition is not a flat floating-point tensor; not mapped",
    ),
    "step a string": (
        {OPTIM.format(0): opt("optimizer_state_dict", "state", 0, "step", value="abc")},
        "",
    ),
}


@pytest.mark.parametrize("forgery", sorted(ZERO3_FORGERIES))
def test_forged_zero3_structures_are_notes_not_tracebacks(tmp_path, monkeypatch, forgery):
    edits, said = ZERO3_FORGERIES[forgery]
    root = forged(tmp_path, monkeypatch, TRAINER_Z3, edits, tag=TRAINER_TAG)
    payload, text = case_text(root)
    assert said in text
    state = optimizer_of(root, TRAINER_TAG)
    if said:  # the group is not mapped, and the weights it holds are said missing once
        assert WTE not in (state.master_weights or {}) and said in " ".join(state.unmapped)
        assert len(rebuild_notes(payload)) == 1


# --- the Trainer's DeepSpeed tag folders; a reason said once per file ------------------------


def rebuild_notes(payload: dict[str, Any]) -> list[dict[str, Any]]:
    return [p for p in payload["partial"] if "could not be rebuilt" in p["problem"]]


def test_trainer_zero3_param_shapes_a_list_is_a_note(tmp_path, monkeypatch):
    root = forged(
        tmp_path,
        monkeypatch,
        TRAINER_Z3,
        {Z3_MODEL: setter("param_shapes", value=[[3]])},
        tag=TRAINER_TAG,
    )
    payload, text = case_text(root)
    assert "param_shapes holds a list, not parameter names and shapes; not mapped" in text
    assert rebuild_notes(payload) == []  # it names no parameter: none is said missing


def test_zero3_reason_is_said_once_per_file_not_once_per_tensor(tmp_path, monkeypatch):
    many = OrderedDict((f"p{i}", torch.Size([1000])) for i in range(300))  # past the partition
    root = forged(
        tmp_path,
        monkeypatch,
        TRAINER_Z3,
        {Z3_MODEL: setter("param_shapes", value=[many])},
        tag=TRAINER_TAG,
    )
    payload, _ = case_text(root)
    (note,) = rebuild_notes(payload)
    assert note["path"] == TRAINER_TAG
    assert "300 of the 300 parameters could not be rebuilt" in note["problem"]


def test_zero3_rank_file_the_model_does_not_expect_is_said_once(tmp_path):
    root = tmp_path / TRAINER_Z3
    shutil.copytree(LAYOUTS / TRAINER_Z3, root)
    tag = root / TRAINER_TAG
    shutil.copy(tag / OPTIM.format(0), tag / OPTIM.format(1))  # partition_count 1, two files
    payload, _ = case_text(root)
    (note,) = rebuild_notes(payload)
    assert "over 1 ranks, 2 rank file(s) are here" in note["problem"]
