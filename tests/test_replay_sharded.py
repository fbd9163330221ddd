"""Sharded replay (`tscope replay --nproc 2`) on a real 2-rank FSDP2 run saved with DCP
(fixtures/make_fsdp_run.py): the log is reproduced within the single-process tolerance, the
planted rows of both ranks are named, the clean steps around them are not, and `.metadata` is
never unpickled on the way."""

from __future__ import annotations

import json
import math
import pickle
import socket
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tscope.cli import app
from tscope.errors import UnreadableInput, UsageError
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.dcp_storage import load_tensor, load_tensor_region, read_metadata
from tscope.replay.fidelity import REPRODUCED_REL_TOL
from tscope.replay.sample_grads import SUM_REL_TOL

ROOT = Path(__file__).resolve().parents[1]
RUN = ROOT / "fixtures" / "data" / "fsdp" / "planted_rows"
ENTRY = ROOT / "fixtures" / "entries" / "fsdp_entry.py"
CHECKPOINT = RUN / "checkpoints" / "step-40"
MANIFEST = json.loads((RUN / "manifest.json").read_text(encoding="utf-8"))
PLANTED_STEP = MANIFEST["planted"]["step"]


@pytest.fixture(scope="module")
def sharded_case(tmp_path_factory):
    """One 2-process replay through the CLI (torchrun, gloo): ~45 s on a loaded 2-core box."""
    out = tmp_path_factory.mktemp("fsdp") / "case"
    result = CliRunner().invoke(
        app,
        ["replay", str(RUN), "--entry", str(ENTRY), "--around", str(PLANTED_STEP), "--nproc",
         "2", "--out", str(out), "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    return out, json.loads((out / "replay.json").read_text(encoding="utf-8"))


def test_sharded_replay_reproduces_the_logged_losses(sharded_case):
    _, replay = sharded_case
    fidelity = replay["fidelity"]
    assert replay["checkpoint"]["path"] == "checkpoints/step-40"
    assert replay["steps"] == [41, PLANTED_STEP + 5]
    assert fidelity["compared_steps"] == PLANTED_STEP + 5 - 40
    assert fidelity["reproduced"] is True
    assert fidelity["max_rel_loss_diff"] <= REPRODUCED_REL_TOL  # the single-process tolerance
    assert fidelity["grad_norm_reproduced"] is True


def test_sharded_replay_names_the_planted_rows_of_both_ranks(sharded_case):
    out, replay = sharded_case
    bad = sorted((b["step"], b["index"]) for b in replay["bad_samples"])
    assert bad == [(PLANTED_STEP, row) for row in MANIFEST["planted"]["global_rows"]]
    attributed = {a["step"]: a for a in replay["sample_attribution"]}
    assert sorted(attributed) == list(range(PLANTED_STEP - 3, PLANTED_STEP + 1))
    for step, record in attributed.items():
        assert record["method"] == "sharded_per_row"
        assert record["sum_rel_diff"] <= SUM_REL_TOL  # Σ g_i is the step's sharded gradient
        assert math.isclose(sum(record["share"]), 1.0, rel_tol=1e-4)
        assert record["micro_batch_rows"] == [8, 8]  # rank 0's rows, then rank 1's
        if step != PLANTED_STEP:
            assert record["bad"] == [], f"clean step {step} flagged"
    assert (out / "case.json").is_file()


def test_sharded_replay_all_reduces_the_per_layer_norms(sharded_case):
    _, replay = sharded_case
    first = replay["per_step"][0]
    assert first["samples"] == 16  # both ranks' rows
    norms = {layer: stats for layer, stats in first["layers"].items()}
    assert set(norms) >= {"embed.weight", "blocks.0.up.weight", "head.bias"}
    full = load_tensor(CHECKPOINT, read_metadata(CHECKPOINT, "step-40", LoadOptions()),
                       "model.head.weight", "step-40")  # fmt: skip
    # ‖W‖ before step 41's update is the checkpoint's whole tensor, not one rank's half
    # (replay.json keeps 6 significant digits).
    assert math.isclose(norms["head.weight"]["weight_norm"], float(full.norm()), rel_tol=1e-5)
    half = float(full[: full.shape[0] // 2].norm())
    assert not math.isclose(norms["head.weight"]["weight_norm"], half, rel_tol=1e-2)


def test_region_read_matches_the_full_tensor():
    metadata = read_metadata(CHECKPOINT, "step-40", LoadOptions())
    key = "optim.state.blocks.1.up.weight.exp_avg"  # (64, 32), saved as two 32-row chunks
    full = load_tensor(CHECKPOINT, metadata, key, "step-40")
    across = load_tensor_region(CHECKPOINT, metadata, key, (20, 4), (30, 10), "step-40")
    assert across.equal(full[20:50, 4:14])  # straddles both ranks' chunks
    with pytest.raises(UnreadableInput, match="lies outside"):
        load_tensor_region(CHECKPOINT, metadata, key, (60, 0), (8, 32), "step-40")


@pytest.fixture
def one_rank_group(monkeypatch):
    """A 1-process gloo group in this process (FSDP2 on a mesh of one)."""
    import torch.distributed as dist

    monkeypatch.setenv("MASTER_ADDR", "127.0.0.1")
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        monkeypatch.setenv("MASTER_PORT", str(probe.getsockname()[1]))
    dist.init_process_group("gloo", rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def test_a_meta_device_model_gets_its_weights_from_the_folder(one_rank_group):
    import dataclasses
    import sys

    import torch
    from torch.distributed.device_mesh import init_device_mesh

    from tscope.replay.entry import load_entry
    from tscope.replay.sharded_restore import restore_sharded

    sys.path.insert(0, str(ROOT / "fixtures"))
    import fsdp_run_spec

    def on_meta(config):
        with torch.device("meta"):
            return fsdp_run_spec.CharMLP()

    entry = dataclasses.replace(load_entry(ENTRY), build_model=on_meta)
    mesh = init_device_mesh("cpu", (1,))
    restored = restore_sharded(CHECKPOINT, "step-40", entry, mesh, torch.device("cpu"))
    metadata = read_metadata(CHECKPOINT, "step-40", LoadOptions())
    for name, parameter in restored.model.named_parameters():
        assert not parameter.is_meta
        saved = load_tensor(CHECKPOINT, metadata, f"model.{name}", "step-40")
        assert parameter.full_tensor().equal(saved), name


def test_restore_never_unpickles_metadata(monkeypatch, one_rank_group):
    """One gloo process: the FSDP2 model's weights and Adam moments come from the DCP folder
    while torch's metadata reader and pickle.load are booby-trapped."""
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh

    from tscope.replay.entry import load_entry
    from tscope.replay.sharded_restore import restore_sharded

    def refuse(*args, **kwargs):
        raise AssertionError("DCP .metadata was unpickled")

    monkeypatch.setattr(dcp.FileSystemReader, "read_metadata", refuse)
    monkeypatch.setattr(dcp, "load", refuse)
    monkeypatch.setattr(pickle, "load", refuse)
    mesh = init_device_mesh("cpu", (1,))
    entry = load_entry(ENTRY)
    restored = restore_sharded(CHECKPOINT, "step-40", entry, mesh, torch.device("cpu"))
    metadata = read_metadata(CHECKPOINT, "step-40", LoadOptions())
    head = dict(restored.model.named_parameters())["head.weight"]
    expected = load_tensor(CHECKPOINT, metadata, "model.head.weight", "step-40")
    assert head.full_tensor().equal(expected)
    moment = restored.optimizer.state[head]["exp_avg_sq"]
    saved = load_tensor(CHECKPOINT, metadata, "optim.state.head.weight.exp_avg_sq", "s")
    assert moment.full_tensor().equal(saved)
    assert float(restored.optimizer.state[head]["step"]) == 40.0
    assert restored.optimizer.param_groups[0]["weight_decay"] == 0.01


def test_nproc_without_a_dcp_checkpoint_is_one_line(tmp_path):
    (tmp_path / "run").mkdir()
    from tscope.sharded_replay_pipeline import choose_dcp_checkpoint

    with pytest.raises(UsageError, match="No DCP checkpoint"):
        choose_dcp_checkpoint(tmp_path / "run", 10)


def test_nproc_refuses_what_ifs(tmp_path):
    result = CliRunner().invoke(
        app,
        ["replay", str(RUN), "--entry", str(ENTRY), "--around", "47", "--nproc", "2",
         "--what-if", "skip", "--out", str(tmp_path / "case"), "--quiet"],
    )  # fmt: skip
    assert result.exit_code == 2
    assert "--what-if" in result.output


def test_rows_are_split_in_training_order():
    import torch

    from tscope.replay.sharded_attribution import _first_rows, _row_batches

    first = {"input_ids": torch.arange(6).view(3, 2), "labels": torch.arange(6).view(3, 2)}
    second = {"input_ids": torch.arange(6, 10).view(2, 2), "labels": torch.arange(6, 10).view(2, 2)}
    rows = _row_batches([first, second])
    assert [r["input_ids"].tolist() for r in rows] == [[[0, 1]], [[2, 3]], [[4, 5]], [[6, 7]],
                                                        [[8, 9]]]  # fmt: skip
    assert _first_rows(first, 0)["labels"].shape == (0, 2)  # a rank without rows


def test_a_folder_whose_records_share_bytes_is_not_restored(tmp_path):
    # The folder-wide check `tscope analyze` makes: two tensors' records spelled onto one region
    # once cost the sharded restore one load of that region per record.
    import shutil

    from tscope.replay.sharded_restore import read_folder_metadata

    folder = tmp_path / "step-40"
    shutil.copytree(CHECKPOINT, folder)
    metadata = pickle.loads((folder / ".metadata").read_bytes())
    first, second = [i for i in metadata.storage_data if i.fqn.startswith("model.")][:2]
    metadata.storage_data[second] = metadata.storage_data[first]
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(UnreadableInput, match="share bytes"):
        read_folder_metadata(folder, "step-40")
    assert read_folder_metadata(CHECKPOINT, "step-40").storage  # the real folder still reads
