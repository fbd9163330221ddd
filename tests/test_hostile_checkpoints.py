"""Hostile checkpoints (issue 9, checkpoint side): files a stranger crafted to run code, write or
read outside what tscope was given, exhaust memory or time, or crash it with a traceback.

Every file is built at test time and the real CLI runs in a child under memory and time limits
(tests/hostile.py). Each test asserts the promise of docs/security.md that the crafted file once
broke: nothing created outside --out, nothing outside the input read, no traceback, one line and
exit 2 or a partial case naming the file and what to do. The parsers' property-based fuzzing is
tests/test_hostile_checkpoint_fuzz.py.
"""

from __future__ import annotations

import json
import pathlib
import pickle
import shutil
import struct
import time
from pathlib import Path
from typing import Any

import pytest
import torch
from hostile import run_tscope, tree_digest

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.dcp import DcpReader
from tscope.ingest.checkpoints.hf_trainer import HfTrainerReader

OPTIONS = LoadOptions()
LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layouts"

LFS_POINTER = (
    b"version https://git-lfs.github.com/spec/v1\n"
    b"oid sha256:4d7a214614ab2935c943f9e0ff69d22eadbb8f32b1258daaa5e2ca24d17e2393\n"
    b"size 498135208\n"
)


def write_metrics(run: Path) -> None:
    """A small loss log, so that the run is analyzable apart from the crafted file."""
    run.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"{step},{3 - step * 0.01:.4f}\n" for step in range(60))
    (run / "metrics.csv").write_text("step,loss\n" + rows)


def case_partial(out: Path) -> dict[str, str]:
    case = json.loads((out / "case.json").read_text())
    return {entry["path"]: entry["problem"] for entry in case["partial"]}


def outside_out(root: Path, out_prefix: str) -> dict[str, str]:
    """The tree digest of root without the output folders (named `out_prefix...`)."""
    return {k: v for k, v in tree_digest(root).items() if not k.startswith(out_prefix)}


def posix_path_attack(target: Path) -> bytes:
    """The 107-byte .metadata: BUILD on the class pathlib.PosixPath with slot state
    {_str: target, mkdir: OrderedDict}, which a restricted unpickler applies with setattr on the
    class itself, so every PosixPath in the process then points at `target`."""
    return (
        b"cpathlib\nPosixPath\n"
        b"N}(V_str\nV" + str(target).encode() + b"\nVmkdir\nccollections\nOrderedDict\nu"
        b"\x86b."
    )


def test_a_metadata_that_builds_on_a_class_changes_nothing_and_writes_nothing(tmp_path):
    marker = tmp_path / "PWNED"
    runs = tmp_path / "runs"
    write_metrics(runs / "a")
    folder = runs / "a" / "step_2"
    shutil.copytree(LAYOUTS / "dcp_single" / "step_2", folder)
    (folder / ".metadata").write_bytes(posix_path_attack(marker))
    before = dict(vars(pathlib.PosixPath))

    with pytest.raises(UnreadableInput, match="not a DCP Metadata"):
        DcpReader().open(folder, "step_2", OPTIONS)
    assert dict(vars(pathlib.PosixPath)) == before  # no attribute of the class was touched
    assert str(Path("/x")) == "/x"

    digest = tree_digest(tmp_path)
    for command in ("cluster", "analyze"):
        out = tmp_path / f"out-{command}"
        source = runs if command == "cluster" else runs / "a"
        outcome = run_tscope(command, source, "--out", out, cwd=tmp_path)
        outcome.assert_no_traceback()
        assert outcome.returncode == 0, outcome.stderr[-2000:]
        assert not marker.exists()
        assert outside_out(tmp_path, "out-") == digest  # nothing outside --out changed
    assert "step_2/.metadata" in case_partial(tmp_path / "out-analyze")


def test_a_stride_zero_view_and_an_oversized_dcp_tensor_are_refused_within_memory(tmp_path):
    run = tmp_path / "run"
    write_metrics(run)
    # 1.7 KB on disk, 32 GiB once materialized: one float expanded by stride 0.
    torch.save({"w": torch.ones(1).expand(1 << 33)}, run / "step_5.pt")
    assert (run / "step_5.pt").stat().st_size < 4096
    # A DCP tensor declaring [2^17, 2^17] float32 (64 GiB) stored in a 1.5 KB record.
    folder = run / "step_9"
    shutil.copytree(LAYOUTS / "dcp_single" / "step_2", folder)
    metadata = pickle.loads((folder / ".metadata").read_bytes())  # the fixture: trusted
    entry = metadata.state_dict_metadata["model.emb.weight"]
    entry.size = torch.Size([1 << 17, 1 << 17])
    entry.chunks[0].sizes = torch.Size([1 << 17, 1 << 17])
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))

    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out, cwd=tmp_path)
    outcome.assert_no_traceback()  # the 3 GiB address-space limit was never hit
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    partial = case_partial(out)
    assert "storage of 4 bytes" in partial["step_5.pt"]
    assert "view" in partial["step_5.pt"]
    assert any(
        "model.emb.weight" in problem and "allocates only what the files back" in problem
        for problem in partial.values()
    ), partial


def test_shards_named_outside_the_checkpoint_are_never_opened(tmp_path):
    from safetensors.torch import save_file

    outside = tmp_path / "outside"
    outside.mkdir()
    save_file({"secret.weight": torch.ones(2, 2)}, outside / "model-00002.safetensors")
    checkpoint = tmp_path / "run" / "checkpoint-10"
    checkpoint.mkdir(parents=True)
    save_file({"inside.weight": torch.ones(2, 2)}, checkpoint / "model-00001.safetensors")
    index = {
        "weight_map": {
            "inside.weight": "model-00001.safetensors",
            "secret.weight": "../../outside/model-00002.safetensors",
            "absolute.weight": str(outside / "model-00002.safetensors"),
        }
    }
    (checkpoint / "model.safetensors.index.json").write_text(json.dumps(index))
    handle = HfTrainerReader().open(checkpoint, "checkpoint-10", OPTIONS)
    assert handle.tensor_names() == ["inside.weight"]
    refused = [p for p in handle.partial if "outside the input folder" in p.problem]
    assert len(refused) == 2
    assert all(p.path == "checkpoint-10/model.safetensors.index.json" for p in refused)

    # DCP: a storage record whose relative_path climbs out of the folder.
    folder = tmp_path / "run" / "step_2"
    shutil.copytree(LAYOUTS / "dcp_single" / "step_2", folder)
    shutil.copyfile(folder / "__0_0.distcp", outside / "__0_0.distcp")
    original = (folder / ".metadata").read_bytes()
    metadata = pickle.loads(original)  # the fixture: trusted
    for where in metadata.storage_data.values():
        where.relative_path = "../../outside/__0_0.distcp"
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    with pytest.raises(UnreadableInput, match="every shard file"):
        DcpReader().open(folder, "step_2", OPTIONS)
    metadata = pickle.loads(original)
    for index, where in metadata.storage_data.items():
        if index.fqn == "model.emb.weight":  # only this tensor's record climbs out
            where.relative_path = "../../outside/__0_0.distcp"
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    handle = DcpReader().open(folder, "step_2", OPTIONS)
    assert any("outside the checkpoint" in p.problem for p in handle.partial)
    with pytest.raises(UnreadableInput, match="outside the input folder"):
        handle.load_tensor("emb.weight")

    write_metrics(tmp_path / "run")
    out = tmp_path / "out"
    outcome = run_tscope("analyze", tmp_path / "run", "--out", out, cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert "secret.weight" not in (out / "case.json").read_text()


LFS_NAMES = ("model.safetensors", "optimizer.pt", "rng_state.pth", "training_args.bin")


def plant_lfs_pointers(run: Path) -> None:
    checkpoint = run / "checkpoint-10"
    checkpoint.mkdir(parents=True)
    for name in (*LFS_NAMES, "pytorch_model.bin"):
        (checkpoint / name).write_bytes(LFS_POINTER)
    (run / "runs").mkdir()
    (run / "runs" / "events.out.tfevents.1700000000.host.1.0").write_bytes(LFS_POINTER)


def test_git_lfs_pointers_are_named_as_such_and_a_run_of_only_pointers_is_not_healthy(tmp_path):
    only = tmp_path / "only"
    plant_lfs_pointers(only)
    outcome = run_tscope("analyze", only, "--out", tmp_path / "out-only", cwd=tmp_path)
    outcome.assert_one_line_error("Nothing analyzable", "Git LFS pointer", "git lfs pull")
    assert "--trust-pickle" not in outcome.stderr
    assert not (tmp_path / "out-only" / "case.json").exists()

    mixed = tmp_path / "mixed"
    plant_lfs_pointers(mixed)
    write_metrics(mixed)
    out = tmp_path / "out-mixed"
    outcome = run_tscope("analyze", mixed, "--out", out, cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    partial = case_partial(out)
    for name in (*(f"checkpoint-10/{n}" for n in LFS_NAMES), "events.out.tfevents"):
        problem = next(v for k, v in partial.items() if name in k)
        assert "Git LFS pointer, not the file: run `git lfs pull`" in problem, (name, problem)
    assert "--trust-pickle" not in json.dumps(partial)


def forged_numpy_rng_state(path: Path) -> None:
    """A Trainer rng_state.pth whose numpy part the allowed numpy globals rebuild but the
    generator cannot take: a key array of 100 words and a position past its end. (A weights-only
    load admits numpy dtype and ndarray objects, so anything of that shape can come back.)"""
    import random

    import numpy as np

    kind, keys, _, has_gauss, cached = np.random.get_state()
    forged = (kind, keys[:100].copy(), 10**6, has_gauss, cached)
    with pytest.raises(
        (ValueError, IndexError)
    ):  # what a replay's restore would have met, as a traceback
        np.random.RandomState().set_state(forged)
    state = {"python": random.getstate(), "numpy": forged, "cpu": torch.random.get_rng_state()}
    torch.save(state, path)


IMPLAUSIBLE_STEPS = ("1e26", "NaN", "abc", str(1 << 63))


def test_implausible_steps_a_deep_config_and_a_forged_rng_state_are_partial(tmp_path):
    from safetensors.torch import save_file

    run = tmp_path / "run"
    write_metrics(run)
    for number, step in enumerate(IMPLAUSIBLE_STEPS, start=1):
        metadata = {"step": step}
        save_file({"w": torch.ones(4, 4)}, run / f"step_{number}.safetensors", metadata=metadata)
    checkpoint = run / "checkpoint-10"
    checkpoint.mkdir()
    save_file({"v": torch.ones(4, 4)}, checkpoint / "model.safetensors")
    (checkpoint / "config.json").write_text("[" * 100_000 + "]" * 100_000)
    forged_numpy_rng_state(checkpoint / "rng_state.pth")
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out, cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    partial = case_partial(out)
    assert "nested too deeply" in partial["checkpoint-10/config.json"]
    assert "numpy state is not a generator state" in partial["checkpoint-10/rng_state.pth"]
    steps = [c["step"] for c in json.loads((out / "case.json").read_text())["checkpoints"]]
    assert {1, 2, 3, 4} <= set(steps)  # an implausible step falls back to the file name


def write_many_tensors(path: Path, count: int) -> None:
    """A valid safetensors file of `count` one-element float32 tensors (header written directly:
    the library's writer would take longer than the read under test)."""
    header: dict[str, Any] = {"__metadata__": {"step": "5"}}
    for index in range(count):
        header[f"layers.{index}.w"] = {
            "dtype": "F32",
            "shape": [1],
            "data_offsets": [4 * index, 4 * index + 4],
        }
    raw = json.dumps(header, separators=(",", ":")).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * (4 * count))


def test_a_file_of_200k_tiny_tensors_is_read_in_bounded_time_with_a_note(tmp_path):
    from tscope.ingest.checkpoints.stats.layers import MAX_TENSORS_PER_CHECKPOINT

    run = tmp_path / "run"
    write_metrics(run)
    write_many_tensors(run / "step_5.safetensors", 200_000)
    out = tmp_path / "out"
    started = time.monotonic()
    outcome = run_tscope("analyze", run, "--out", out, cwd=tmp_path, timeout=300)
    elapsed = time.monotonic() - started
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert elapsed < 240  # quadratic before: > 10 minutes for 20,000 tensors
    problem = case_partial(out)["step_5.safetensors"]
    assert f"holds 200000 tensors; statistics cover the first {MAX_TENSORS_PER_CHECKPOINT}" in (
        problem
    )
