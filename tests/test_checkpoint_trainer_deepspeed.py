"""transformers.Trainer checkpoints saved under DeepSpeed ZeRO-2 and ZeRO-3 (real files).

fixtures/data/layouts/trainer_deepspeed_zero{2,3}/ (fixtures/layout_trainer_deepspeed.py): the
Trainer writes no optimizer.pt under DeepSpeed; the optimizer is in the `global_step{N}/` tag
folder inside each `checkpoint-N/`, and under ZeRO-3 (saved without gathering) the weights too.
Read as one Trainer checkpoint, its optimizer and weights were missed ("optimizer moments
missing", and with no LR known the update-ratio windows were compared raw).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.registry import find_checkpoints
from tscope.ingest.checkpoints.state_dict_files import normalize_name
from tscope.pipeline import analyze_run

LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layouts"
STAGES = ["trainer_deepspeed_zero2", "trainer_deepspeed_zero3"]


def manifest(layout: str) -> dict:
    return json.loads((LAYOUTS / layout / "manifest.json").read_text())


@pytest.mark.parametrize("layout", STAGES)
def test_each_checkpoint_is_one_trainer_checkpoint_with_the_tag_folders_optimizer(layout):
    truth = manifest(layout)
    parameters = {normalize_name(name) for name in truth["parameters"]}
    found = find_checkpoints(LAYOUTS / layout)
    assert [(reader.name, shown) for reader, _, shown in found] == [
        ("hf_trainer", "checkpoint-2"),
        ("hf_trainer", "checkpoint-4"),
    ]
    for reader, path, shown in found:
        handle = reader.open(path, shown, LoadOptions())
        try:
            step = str(handle.info.step)
            assert handle.info.has_optimizer and handle.partial == []
            assert reader.describe(path, shown) == handle.info
            state = handle.optimizer_state()
            assert state is not None and state.unmapped == []
            assert set(state.per_param) == parameters
            assert state.param_groups[0]["lr"] == pytest.approx(truth["checkpoints"][step]["lr"])
            assert handle.audit().missing() == []  # no "optimizer moments" it does not lack
            names = set(handle.tensor_names())
            if layout.endswith("zero3"):  # no model.safetensors: the fp32 masters are the weights
                assert names == parameters
                for name in names:
                    weight = handle.load_tensor(name)
                    assert weight.equal(state.master_weights[name])
                    assert state.per_param[name]["exp_avg"].shape == weight.shape
            else:
                assert parameters <= names | {"lm_head.weight"}
        finally:
            handle.close()


def test_the_case_says_the_optimizer_is_there():
    case = analyze_run(LAYOUTS / "trainer_deepspeed_zero2").case
    assert all(info.has_optimizer for info in case.checkpoints)
    assert not [f for f in case.findings if f.category == "checkpoint_incomplete"]


@pytest.mark.parametrize("layout", ["trainer_deepspeed_zero2", "trainer_deepspeed_zero3"])
def test_an_unreadable_deepspeed_optimizer_is_one_line_per_file(tmp_path, layout):
    """The tag folder's optimizer file emptied (a save cut short): the optimizer is lost, the
    rest is read. Dropping the DeepSpeed handle sent every weight to the Trainer's folder, which
    (under ZeRO-3) holds none: one "holds no tensor named …" entry per tensor (found by a
    hostile-input review); a file is listed once."""
    import shutil

    run = tmp_path / "run"
    shutil.copytree(LAYOUTS / layout, run)
    optimizer = next(run.glob("checkpoint-4/global_step*/*optim_states.pt"))
    optimizer.write_bytes(b"")
    case, _ = analyze_run(str(run))
    paths = [entry.path for entry in case.partial]
    assert len(paths) == len(set(paths))
    assert any(path.endswith(optimizer.name) for path in paths)
    assert not any("holds no tensor named" in entry.problem for entry in case.partial)
    assert [c.step for c in case.checkpoints] == [2, 4]
