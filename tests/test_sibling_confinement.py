"""Checkpoint readers never step above the input, and a checkpoint without a step is analyzed.

A Trainer checkpoint's audit looked at its sibling `checkpoint-*/` folders for a scaler.pt,
DeepSpeed's reader opened the run folder's `latest` and listed the original of a
`<tag>_universal/` conversion, and Lightning's listed the `.ckpt` files beside a `last.ckpt`:
given the checkpoint alone (`tscope analyze run/checkpoint-120`), each looked into `run/`, which
the user never named (docs/security.md, "Nothing outside the input is read"). A universal folder
or a last.ckpt named alone was not even analyzed: the sibling outside the input claimed it.
Now the registry binds each reader to the input root; above it nothing is opened or listed, and a
partial entry says what was not read and to point tscope at the parent folder.

A DCP folder saved by hand (`dcp.save({"model": sd}, checkpoint_id="weights")`) has no step:
`tscope analyze weights` ended in a traceback (`int(NA)` in the layer heat map, then in the
weights rules).

Every layout is the real producers' (fixtures/data/layouts, fixtures/data/trainer), or written
here by torch.distributed.checkpoint itself.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pandas as pd
import pytest
import torch
from typer.testing import CliRunner

from tscope.cli import app
from tscope.ingest.checkpoints.base import CheckpointHandle, LoadOptions
from tscope.ingest.checkpoints.registry import find_checkpoints
from tscope.model import PartialInput

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "data"
LAYOUTS = FIXTURES / "layouts"
TRAINER_RUNS = FIXTURES / "trainer"
OPTIONS = LoadOptions()

# --- what the process opens and lists ---------------------------------------------------------
# Audit hooks see every open() (os.open included) and every listing (os.listdir: Path.iterdir;
# os.scandir: glob, discovery). A hook cannot be removed, so it records only inside `touched()`.
_RECORDING: list[list[str]] = []
_EVENTS = frozenset({"open", "os.listdir", "os.scandir"})


def _audit(event: str, args: tuple[Any, ...]) -> None:
    if _RECORDING and event in _EVENTS and args and isinstance(args[0], (str, bytes, Path)):
        _RECORDING[-1].append(os.path.abspath(os.fsdecode(args[0])))


sys.addaudithook(_audit)


@contextmanager
def touched() -> Iterator[list[str]]:
    """The absolute paths opened or listed inside the block."""
    paths: list[str] = []
    _RECORDING.append(paths)
    try:
        yield paths
    finally:
        _RECORDING.pop()


def outside(paths: list[str], root: Path, tmp_path: Path) -> list[str]:
    """The paths of this test's folder that lie outside the input root (the rest of the
    filesystem, Python's own modules, is not the input's neighbourhood)."""
    base, inside = os.path.realpath(tmp_path), os.path.realpath(root)
    return sorted(
        {
            p
            for p in map(os.path.realpath, paths)
            if p.startswith(base + os.sep) and p != inside and not p.startswith(inside + os.sep)
        }
    )


def open_all(root: Path) -> list[CheckpointHandle]:
    """Every checkpoint under root, opened and audited as `tscope analyze` does."""
    handles = [reader.open(path, shown, OPTIONS) for reader, path, shown in find_checkpoints(root)]
    for handle in handles:
        handle.audit()
    return handles


def problems(handle: CheckpointHandle) -> list[str]:
    return [entry.problem for entry in handle.partial]


# --- Hugging Face Trainer: sibling checkpoint-*/ folders ----------------------------------------


def trainer_run(tmp_path: Path) -> Path:
    """Two Trainer checkpoints; only the later one saved a GradScaler (scaler.pt)."""
    run = tmp_path / "run"
    for name in ("checkpoint-120", "checkpoint-180"):
        shutil.copytree(TRAINER_RUNS / "stable" / name, run / name)
    scaler = {"scale": 1024.0, "growth_factor": 2.0, "backoff_factor": 0.5,
              "growth_interval": 2000, "_growth_tracker": 7}  # fmt: skip
    torch.save(scaler, run / "checkpoint-180" / "scaler.pt")
    return run


HF_NOT_READ = (
    "the checkpoint-*/ folders beside this one in run/ (whether an earlier checkpoint saved "
    "scaler.pt, the GradScaler state this one lacks) are not read: they lie outside the input. "
    "Point tscope at run/ to read them"
)


def test_a_trainer_checkpoint_named_alone_does_not_look_at_its_siblings(tmp_path: Path) -> None:
    checkpoint = trainer_run(tmp_path) / "checkpoint-120"
    with touched() as paths:
        [handle] = open_all(checkpoint)
        audit = handle.audit()
    assert outside(paths, checkpoint, tmp_path) == []  # run/ was neither listed nor read
    assert not any("checkpoint-180" in note for note in audit.notes)
    assert audit.has_scaler is None  # nothing in the input says a scaler was expected
    assert handle.partial == [PartialInput("checkpoint-120", HF_NOT_READ)]


def test_a_trainer_checkpoint_read_from_its_run_folder_still_sees_the_siblings_scaler(
    tmp_path: Path,
) -> None:
    run = trainer_run(tmp_path)
    handles = {handle.info.path: handle for handle in open_all(run)}
    audit = handles["checkpoint-120"].audit()
    assert audit.has_scaler is False and "GradScaler state" in audit.missing()
    assert any("checkpoint-180 has scaler.pt" in note for note in audit.notes)
    assert all(HF_NOT_READ not in problems(handle) for handle in handles.values())


def test_a_trainer_checkpoint_with_its_own_scaler_needs_no_sibling_and_says_nothing(
    tmp_path: Path,
) -> None:
    checkpoint = trainer_run(tmp_path) / "checkpoint-180"
    [handle] = open_all(checkpoint)
    assert handle.audit().has_scaler is True
    assert handle.partial == []


def test_a_linked_sibling_checkpoint_lends_no_scaler(tmp_path: Path) -> None:
    """Inside the input the siblings are looked at by lstat: a `checkpoint-9` linked to a folder
    elsewhere is not followed, as discovery does not follow it."""
    run = trainer_run(tmp_path)
    elsewhere = tmp_path / "elsewhere"
    (run / "checkpoint-180").rename(elsewhere)
    (run / "checkpoint-9").symlink_to(elsewhere, target_is_directory=True)
    with touched() as paths:
        [handle] = open_all(run)
    assert not any(p.startswith(os.path.realpath(elsewhere)) for p in map(os.path.realpath, paths))
    assert not any("has scaler.pt" in note for note in handle.audit().notes)


# --- DeepSpeed: `latest` and the original of a universal conversion -----------------------------


def deepspeed_layout(tmp_path: Path, layout: str) -> Path:
    target = tmp_path / layout
    shutil.copytree(LAYOUTS / layout, target)
    return target


def test_a_deepspeed_tag_named_alone_leaves_latest_unread_and_says_so(tmp_path: Path) -> None:
    run = deepspeed_layout(tmp_path, "deepspeed_zero1_2ranks")
    (run / "latest").write_text("global_step9")
    tag = run / "global_step2"
    with touched() as paths:
        [handle] = open_all(tag)
    assert outside(paths, tag, tmp_path) == []
    assert not any("global_step9" in note for note in handle.audit().notes)
    assert handle.partial == [
        PartialInput(
            "global_step2",
            "`latest` (the tag a resume without a tag loads) beside this folder in "
            "deepspeed_zero1_2ranks/ is not read: it lies outside the input. Point tscope at "
            "deepspeed_zero1_2ranks/ to read it",
        )
    ]
    # Pointed at the run folder, `latest` is read as before and nothing is missing.
    [handle] = open_all(run)
    assert "`latest` names global_step9: a resume without a tag loads that one" in (
        handle.audit().notes
    )
    assert handle.partial == []


def test_a_universal_folder_named_alone_is_analyzed_without_listing_its_original(
    tmp_path: Path,
) -> None:
    """Beside its original `global_step2/`, a `global_step2_universal/` is the same checkpoint
    and is skipped; named alone, the original lies outside the input: it was listed, and the
    universal folder, left unclaimed, was not analyzed at all."""
    layout = deepspeed_layout(tmp_path, "deepspeed_zero2_bf16")
    universal = layout / "global_step2_universal"
    with touched() as paths:
        handles = open_all(universal)
    assert outside(paths, universal, tmp_path) == []
    assert [(h.info.format, h.info.step) for h in handles] == [("deepspeed_universal", 2)]
    assert "`latest_universal`" in problems(handles[0])[0]
    # From the layout folder the original is the checkpoint, once.
    assert [h.info.path for h in open_all(layout)] == ["global_step2"]


# --- Lightning: the .ckpt files beside a last.ckpt ----------------------------------------------


def test_a_last_ckpt_named_alone_is_analyzed_without_listing_its_folder(tmp_path: Path) -> None:
    folder = tmp_path / "lightning"
    shutil.copytree(LAYOUTS / "lightning", folder)
    last = folder / "last.ckpt"
    with touched() as paths:
        found = find_checkpoints(last)
    assert outside(paths, last, tmp_path) == []
    assert [shown for _, _, shown in found] == ["last.ckpt"]
    # In its folder it repeats epoch=0-step=4.ckpt and is read once, as before.
    assert [shown for _, _, shown in find_checkpoints(folder)] == [
        "epoch=0-step=2.ckpt",
        "epoch=0-step=4.ckpt",
    ]


# --- A DCP checkpoint without a step --------------------------------------------------------------


def dcp_save(state_dict: dict[str, torch.Tensor], folder: Path) -> None:
    """What a user writes by hand: torch.distributed.checkpoint.save, no trainer, no step."""
    from torch.distributed.checkpoint import save  # type: ignore[attr-defined]

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # "torch.distributed is disabled ... single process"
        save({"model": state_dict}, checkpoint_id=str(folder), no_dist=True)


def tiny_state(seed: int, nan: bool = False) -> dict[str, torch.Tensor]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.ReLU(), torch.nn.Linear(8, 2))
    state = {name: value.detach().clone() for name, value in model.state_dict().items()}
    if nan:
        state["0.weight"][0, 0] = float("nan")
    return state


def analyze(run: Path, out: Path) -> dict[str, Any]:
    result = CliRunner().invoke(app, ["analyze", str(run), "--out", str(out), "-q"])
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(
        result.exception
    )
    assert result.exit_code == 0, result.output
    loaded: dict[str, Any] = json.loads((out / "case.json").read_text())
    return loaded


def test_a_dcp_checkpoint_without_a_step_is_analyzed(tmp_path: Path) -> None:
    weights = tmp_path / "weights"
    dcp_save(tiny_state(0), weights)
    case = analyze(weights, tmp_path / "o")
    assert [(c["path"], c["step"]) for c in case["checkpoints"]] == [("weights", None)]
    assert case.get("layers") is None  # a heat map's columns are steps: nothing to place
    layers = pd.read_parquet(tmp_path / "o" / "layers.parquet")
    assert len(layers) == 4 and layers["step"].isna().all()  # its statistics, without a step
    assert set(layers["checkpoint"]) == {"weights"}


def test_nan_in_a_checkpoint_without_a_step_is_reported_without_a_step(tmp_path: Path) -> None:
    run = tmp_path / "run"
    dcp_save(tiny_state(0), run / "step_2")
    dcp_save(tiny_state(1, nan=True), run / "final")
    case = analyze(run, tmp_path / "o")
    [finding] = [f for f in case["findings"] if f["category"] == "nonfinite_weights"]
    assert finding["step"] is None and finding["evidence"]["checkpoint"] == "final"
    assert "Checkpoint final (step unknown) holds NaN/Inf in 1 tensor(s)" in finding["message"]
    assert case["layers"]["steps"] == [2]


def test_checkpoints_without_a_step_beside_stepped_ones_keep_the_step_rules(tmp_path: Path) -> None:
    run = tmp_path / "run"
    dcp_save(tiny_state(0), run / "step_2")
    dcp_save(tiny_state(1, nan=True), run / "step_4")
    dcp_save(tiny_state(2), run / "final")
    dcp_save(tiny_state(3), run / "best")
    case = analyze(run, tmp_path / "o")
    assert [(c["path"], c["step"]) for c in case["checkpoints"]] == [
        ("step_2", 2), ("step_4", 4), ("best", None), ("final", None),
    ]  # fmt: skip
    assert case["layers"]["steps"] == [2, 4]
    [finding] = [f for f in case["findings"] if f["category"] == "nonfinite_weights"]
    assert finding["step"] == 4 and finding["evidence"]["last_finite_checkpoint_step"] == 2


@pytest.mark.parametrize("names", [("alpha", "beta"), ("weights",)])
def test_checkpoints_that_all_lack_a_step_are_analyzed_in_name_order(
    tmp_path: Path, names: tuple[str, ...]
) -> None:
    run = tmp_path / "run"
    for seed, name in enumerate(names):
        dcp_save(tiny_state(seed), run / name)
    case = analyze(run, tmp_path / "o")
    assert [(c["path"], c["step"]) for c in case["checkpoints"]] == [(n, None) for n in names]
    assert case.get("layers") is None
