"""Planted pickles in Lightning, DCP and DeepSpeed files never run; broken files never crash.

Each planted object would create a marker file if anything unpickled it. DCP is the sharpest case:
torch's own `FileSystemReader.read_metadata` is a plain `pickle.load`, and its default load
planner opens non-tensor entries with `weights_only=False`.
"""

from __future__ import annotations

import contextlib
import pickle
import re
import shutil
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.dcp import DcpReader
from tscope.ingest.checkpoints.dcp_metadata import parse_metadata
from tscope.ingest.checkpoints.deepspeed import DeepSpeedReader
from tscope.ingest.checkpoints.evidence import read_checkpoints
from tscope.ingest.checkpoints.lightning import LightningReader

LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layouts"
OPTIONS = LoadOptions()
TRUST = "--trust-pickle"


class CreatesMarker:
    """Unpickling this calls builtins.open(marker, "w"): the file appears iff code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (open, (str(self.marker), "w"))


class CallsTorchLoad:
    """A global from an allowed module (torch) that is not a metadata type: still refused."""

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (torch.load, ("/nonexistent",))


def copy_layout(layout: str, tmp_path: Path) -> Path:
    target = tmp_path / layout
    shutil.copytree(LAYOUTS / layout, target)
    return target


def truncate(path: Path, keep: float = 0.5) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


# --- planted pickles -------------------------------------------------------------------------


@pytest.mark.parametrize("evil", ["marker", "torch.load"])
def test_a_planted_dcp_metadata_is_refused_without_running(tmp_path, evil):
    folder = copy_layout("dcp_single", tmp_path) / "step_2"
    marker = tmp_path / "ran"
    payload = CreatesMarker(marker) if evil == "marker" else CallsTorchLoad()
    (folder / ".metadata").write_bytes(pickle.dumps({"state_dict_metadata": payload}))
    assert DcpReader().can_open(folder)
    with pytest.raises(UnreadableInput, match=TRUST) as caught:
        DcpReader().open(folder, "step_2", OPTIONS)
    assert "outside the safe set" in caught.value.problem
    assert caught.value.path == "step_2/.metadata"
    assert not marker.exists()


def test_torchs_own_metadata_reader_would_have_run_it(tmp_path):
    """Why the restricted unpickler exists: torch 2.13's read_metadata executes the pickle."""
    from torch.distributed.checkpoint import FileSystemReader

    marker = tmp_path / "ran"
    (tmp_path / ".metadata").write_bytes(pickle.dumps(CreatesMarker(marker)))
    with contextlib.suppress(Exception):  # it fails after running the payload: that is the point
        FileSystemReader(tmp_path).read_metadata()
    assert marker.exists()


def test_the_metadata_parser_reads_every_real_metadata_file_as_torch_does():
    """The opcode-level parser agrees with torch's own unpickling on every fixture."""
    from tscope.ingest.checkpoints.dcp_metadata import from_unpickled

    files = sorted(LAYOUTS.rglob(".metadata"))
    assert len(files) == 4
    for file in files:
        parsed = parse_metadata(file.read_bytes())
        assert parsed.tensors and not parsed.damaged
        assert parsed == from_unpickled(pickle.loads(file.read_bytes()))  # trusted fixtures


def test_a_planted_dcp_entry_is_refused_and_the_step_comes_from_the_name(tmp_path):
    """A non-tensor entry saved by dcp.save itself: torch's planner would unpickle it freely."""
    import torch.distributed.checkpoint as dcp

    marker = tmp_path / "ran"
    folder = tmp_path / "step_7"
    dcp.save(
        {"w": torch.ones(3), "step": CreatesMarker(marker)}, checkpoint_id=folder, no_dist=True
    )
    handle = DcpReader().open(folder, "step_7", OPTIONS)
    assert handle.info.step == 7  # from the folder name, after refusing the entry
    assert any(TRUST in p.problem and "entry step" in p.path for p in handle.partial)
    assert torch.equal(handle.load_tensor("w"), torch.ones(3))
    assert not marker.exists()


def test_a_planted_lightning_ckpt_is_refused_without_running(tmp_path):
    marker = tmp_path / "ran"
    raw = torch.load(LAYOUTS / "lightning" / "epoch=0-step=2.ckpt", weights_only=True)
    raw["hyper_parameters"] = {"args": CreatesMarker(marker)}
    torch.save(raw, tmp_path / "epoch=0-step=2.ckpt")
    with pytest.raises(UnreadableInput, match=TRUST):
        LightningReader().open(tmp_path / "epoch=0-step=2.ckpt", "epoch=0-step=2.ckpt", OPTIONS)
    assert not marker.exists()


def test_a_planted_deepspeed_optimizer_file_is_partial_and_the_weights_still_read(tmp_path):
    marker = tmp_path / "ran"
    tag = copy_layout("deepspeed_zero2_bf16", tmp_path) / "global_step2"
    optim = tag / "bf16_zero_pp_rank_0_mp_rank_00_optim_states.pt"
    torch.save({"optimizer_state_dict": {"loss_scaler": CreatesMarker(marker)}}, optim)
    handle = DeepSpeedReader().open(tag, "global_step2", OPTIONS)
    assert handle.load_tensor("head.bias").dtype == torch.bfloat16
    audit = handle.audit()
    assert not audit.has_optimizer_moments
    assert any("optimizer state unreadable" in note for note in audit.notes)
    with pytest.raises(UnreadableInput, match=TRUST):
        handle.optimizer_state()
    evidence, partial = read_checkpoints(tag.parent, OPTIONS)  # the whole run still analyzes
    assert evidence is not None and len(evidence.layers) == 9
    assert any(TRUST in p.problem and p.path.endswith("optim_states.pt") for p in partial)
    assert not marker.exists()


def test_deepspeed_stand_ins_do_not_let_other_globals_through(tmp_path):
    """The stand-ins cover DeepSpeed's own classes only; a planted one next to them is refused."""
    from tscope.ingest.checkpoints.deepspeed_pickle import load_deepspeed_file

    marker = tmp_path / "ran"
    source = (
        LAYOUTS / "deepspeed_zero2_bf16" / "global_step2_universal" / "zero" / "optimizer_state.pt"
    )
    raw = load_deepspeed_file(source, "optimizer_state.pt", OPTIONS)
    assert type(raw["loss_scaler"]).__name__ == "LossScaler"  # our inert stand-in
    assert int(raw["zero_stage"]) == 2
    torch.save({"param_groups": [], "extra": CreatesMarker(marker)}, tmp_path / "o.pt")
    with pytest.raises(UnreadableInput, match=TRUST):
        load_deepspeed_file(tmp_path / "o.pt", "o.pt", OPTIONS)
    assert not marker.exists()


# --- truncated and corrupted files -----------------------------------------------------------


def test_a_truncated_lightning_ckpt_is_partial_in_the_analysis_and_the_rest_is_read(tmp_path):
    run = copy_layout("lightning", tmp_path)
    truncate(run / "epoch=0-step=2.ckpt")
    evidence, partial = read_checkpoints(run, OPTIONS)
    assert evidence is not None
    assert [s.info.path for s in evidence.snapshots] == ["epoch=0-step=4.ckpt"]
    assert [p.path for p in partial] == ["epoch=0-step=2.ckpt"]
    assert "not a readable torch file" in partial[0].problem


def test_a_truncated_dcp_shard_fails_per_tensor_and_the_analysis_goes_on(tmp_path):
    run = copy_layout("dcp_fsdp2_2ranks", tmp_path)
    truncate(run / "step-4" / "__1_0.distcp", keep=0.1)
    handle = DcpReader().open(run / "step-4", "step-4", OPTIONS)
    with pytest.raises(UnreadableInput, match=re.escape("tensor head.weight cannot be read")):
        handle.load_tensor("head.weight")
    evidence, partial = read_checkpoints(run, OPTIONS)
    assert evidence is not None and partial
    assert all("cannot be read" in p.problem or "cut short" in p.problem for p in partial)


def test_missing_dcp_shard_and_garbage_metadata(tmp_path):
    folder = copy_layout("dcp_single", tmp_path) / "step_2"
    (folder / "__0_0.distcp").unlink()
    with pytest.raises(
        UnreadableInput, match=re.escape("every shard file listed in .metadata is missing")
    ):
        DcpReader().open(folder, "step_2", OPTIONS)
    (folder / ".metadata").write_bytes(b"\x80\x04not a pickle at all")
    with pytest.raises(UnreadableInput, match="not a readable DCP metadata file"):
        DcpReader().open(folder, "step_2", OPTIONS)


def test_a_missing_accelerate_optimizer_folder_leaves_weights_and_says_so(tmp_path):
    checkpoint = copy_layout("dcp_accelerate", tmp_path) / "checkpoint-2"
    truncate(checkpoint / "optimizer_0" / ".metadata", keep=0.3)
    handle = DcpReader().open(checkpoint, "checkpoint-2", OPTIONS)
    assert handle.optimizer_state() is None and "emb.weight" in handle.tensor_names()
    assert [p.path for p in handle.partial] == ["checkpoint-2/optimizer_0/.metadata"]
    assert "optimizer moments (exp_avg, exp_avg_sq)" in handle.audit().missing()


def test_truncated_deepspeed_files(tmp_path):
    tag = copy_layout("deepspeed_zero1_2ranks", tmp_path) / "global_step2"
    truncate(tag / "zero_pp_rank_1_mp_rank_00_optim_states.pt")
    handle = DeepSpeedReader().open(tag, "global_step2", OPTIONS)
    assert not handle.audit().has_optimizer_moments
    with pytest.raises(UnreadableInput) as caught:
        handle.optimizer_state()
    assert caught.value.path == "global_step2/zero_pp_rank_1_mp_rank_00_optim_states.pt"
    truncate(tag / "mp_rank_00_model_states.pt")
    with pytest.raises(UnreadableInput, match="not a readable torch file"):
        DeepSpeedReader().open(tag, "global_step2", OPTIONS)


def test_a_truncated_universal_moment_file_is_unreadable_input(tmp_path):
    universal = copy_layout("deepspeed_zero2_bf16", tmp_path) / "global_step2_universal"
    truncate(universal / "zero" / "head.weight" / "exp_avg.pt")
    handle = DeepSpeedReader().open(universal, "u", OPTIONS)
    with pytest.raises(UnreadableInput, match=re.escape("u/zero/head.weight/exp_avg.pt")):
        handle.optimizer_state()


METADATA = (LAYOUTS / "dcp_fsdp2_2ranks" / "step-4" / ".metadata").read_bytes()
CKPT = (LAYOUTS / "lightning_named_groups" / "epoch=0-step=2.ckpt").read_bytes()


@settings(
    max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    cut=st.integers(0, len(METADATA) - 1),
    flips=st.lists(st.integers(0, len(METADATA) - 1), max_size=3),
)
@example(cut=0, flips=[1388])  # a flip that left a tensor entry without its `size` field
def test_damaged_metadata_is_unreadable_input_or_still_a_checkpoint(tmp_path, cut, flips):
    data = bytearray(METADATA[:cut] if not flips else METADATA)
    for position in flips:
        if position < len(data):
            data[position] ^= 0xFF
    folder = tmp_path / f"step-{cut}"
    folder.mkdir(exist_ok=True)
    (folder / ".metadata").write_bytes(bytes(data))
    for shard in ("__0_0.distcp", "__1_0.distcp"):
        target = folder / shard
        if not target.exists():  # a copy: links inside the input are refused
            shutil.copyfile(LAYOUTS / "dcp_fsdp2_2ranks" / "step-4" / shard, target)
    try:
        handle = DcpReader().open(folder, folder.name, OPTIONS)
    except UnreadableInput:
        return
    handle.tensor_names()
    handle.audit()


@settings(
    max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(cut=st.integers(0, len(CKPT) - 1))
def test_a_ckpt_cut_anywhere_is_unreadable_input(tmp_path, cut):
    (tmp_path / "epoch=0-step=2.ckpt").write_bytes(CKPT[:cut])
    with pytest.raises(UnreadableInput):
        LightningReader().open(tmp_path / "epoch=0-step=2.ckpt", "epoch=0-step=2.ckpt", OPTIONS)
