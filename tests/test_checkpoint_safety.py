"""A stranger's checkpoint must never run code, and a broken one must never end in a traceback.

The planted files would create a marker file if anything unpickled them: a bare pickle whose
`__reduce__` calls `open(marker, "w")`, a torch zip file whose data.pkl holds the same global,
and a training_args.bin doing it too. Everything else in the run must still be read.
"""

from __future__ import annotations

import io
import pickle
import shutil
import zipfile
from pathlib import Path

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import tscope
from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.hf_trainer import HfTrainerReader
from tscope.ingest.checkpoints.pickle_literals import pickle_literals, torch_file_literals
from tscope.ingest.checkpoints.registry import find_checkpoints
from tscope.ingest.checkpoints.state_dict_files import StateDictFileReader

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "trainer"
OPTIONS = LoadOptions()


class CreatesMarker:
    """Unpickling this calls builtins.open(marker, "w"): the file appears iff code ran."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (open, (str(self.marker), "w"))


def plant(run: Path, marker: Path) -> None:
    """Poison checkpoint-180: optimizer.pt (bare pickle), rng_state.pth (torch zip),
    scheduler.pt (protocol-4 pickle), training_args.bin (torch zip)."""
    folder = run / "checkpoint-180"
    payload = {"state": CreatesMarker(marker), "param_groups": []}
    (folder / "optimizer.pt").write_bytes(pickle.dumps(payload, protocol=2))
    torch.save({"python": CreatesMarker(marker), "cpu": torch.zeros(3)}, folder / "rng_state.pth")
    (folder / "scheduler.pt").write_bytes(pickle.dumps([CreatesMarker(marker)], protocol=4))
    torch.save(CreatesMarker(marker), folder / "training_args.bin")
    assert not marker.exists()
    with zipfile.ZipFile(folder / "rng_state.pth") as archive:  # the global is really in there
        data = next(n for n in archive.namelist() if n.endswith("data.pkl"))
        assert b"io\nopen\n" in archive.read(data)  # GLOBAL io.open, i.e. builtins.open


@pytest.fixture
def poisoned_run(tmp_path: Path) -> tuple[Path, Path]:
    run = tmp_path / "run"
    shutil.copytree(RUNS / "lr_jump", run)
    marker = tmp_path / "PWNED"
    plant(run, marker)
    return run, marker


def test_planted_pickles_never_run_and_the_rest_is_read(poisoned_run):
    run, marker = poisoned_run
    found = find_checkpoints(run)
    assert [shown for _, _, shown in found] == [
        "checkpoint-120",
        "checkpoint-180",
        "checkpoint-240",
    ]
    partial = {}
    for reader, path, shown in found:
        handle = reader.open(path, shown, OPTIONS)
        for name in handle.tensor_names():  # every tensor, as the statistics pass reads them
            assert torch.isfinite(handle.load_tensor(name).float().norm())
        state = handle.optimizer_state()
        audit = handle.audit()
        if shown == "checkpoint-180":
            assert state is None and not audit.has_optimizer_moments
            assert not audit.has_scheduler and audit.rng_ranks == ()
            assert handle.training_args is None  # type: ignore[attr-defined]
        else:
            assert state is not None and len(state.per_param) == 28 and audit.missing() == []
        partial.update({p.path: p.problem for p in handle.partial})
        handle.close()
    assert not marker.exists()
    refused = ("optimizer.pt", "rng_state.pth", "scheduler.pt")
    for name in refused:
        problem = partial[f"checkpoint-180/{name}"]
        assert "pickled objects outside the safe set" in problem and "--trust-pickle" in problem
    assert "never unpickled" in partial["checkpoint-180/training_args.bin"]
    assert set(partial) == {f"checkpoint-180/{n}" for n in (*refused, "training_args.bin")}


def test_analyze_of_a_poisoned_run_runs_nothing_and_lists_the_refused_files(poisoned_run):
    run, marker = poisoned_run
    case = tscope.analyze(run)
    assert not marker.exists()
    assert [c.step for c in case.checkpoints] == [120, 180, 240]
    assert case.metrics  # the logs are still analyzed
    refused = {p.path: p.problem for p in case.partial}
    for name in ("optimizer.pt", "rng_state.pth"):
        assert any(path.endswith(f"checkpoint-180/{name}") for path in refused)
    assert all("--trust-pickle" in problem for path, problem in refused.items() if "pth" in path)


def test_the_command_line_exits_0_on_a_poisoned_run_and_writes_nothing_into_it(poisoned_run):
    from typer.testing import CliRunner

    from tscope.cli import app

    run, marker = poisoned_run
    before = sorted(p.relative_to(run) for p in run.rglob("*"))
    result = CliRunner().invoke(app, ["analyze", str(run), "-o", str(run.parent / "case"), "-q"])
    assert result.exit_code == 0, result.output
    assert not marker.exists()
    assert sorted(p.relative_to(run) for p in run.rglob("*")) == before


def test_the_literal_reader_never_imports_what_a_pickle_names(tmp_path):
    marker = tmp_path / "PWNED"
    payload = pickle.dumps({"lr": 0.1, "hook": CreatesMarker(marker)}, protocol=2)
    assert pickle_literals(payload) == {"lr": 0.1, "hook": None}
    assert pickle_literals(pickle.dumps(CreatesMarker(marker), protocol=4)) is None
    assert not marker.exists()


def test_truncated_safetensors_leaves_the_rest_of_the_checkpoint_readable(tmp_path):
    folder = tmp_path / "checkpoint-120"
    shutil.copytree(RUNS / "stable" / "checkpoint-120", folder)
    weights = folder / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    handle = HfTrainerReader().open(folder, "checkpoint-120", OPTIONS)
    assert handle.tensor_names() == []
    assert [p.path for p in handle.partial] == ["checkpoint-120/model.safetensors"]
    assert "not a readable safetensors file" in handle.partial[0].problem
    audit = handle.audit()
    assert not audit.has_weights and audit.has_optimizer_moments and audit.has_scheduler
    state = handle.optimizer_state()  # read, but nothing to name it after
    assert state is not None and state.per_param == {} and state.unmapped


def test_truncated_optimizer_is_partial_not_a_traceback(tmp_path):
    folder = tmp_path / "checkpoint-120"
    shutil.copytree(RUNS / "stable" / "checkpoint-120", folder)
    optimizer = folder / "optimizer.pt"
    optimizer.write_bytes(optimizer.read_bytes()[:50_000])
    handle = HfTrainerReader().open(folder, "checkpoint-120", OPTIONS)
    assert handle.optimizer_state() is None
    assert not handle.audit().has_optimizer_moments
    assert [p.path for p in handle.partial] == ["checkpoint-120/optimizer.pt"]
    assert "not a readable torch file" in handle.partial[0].problem
    assert len(handle.tensor_names()) == 28


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        (lambda path: torch.save({"note": "hello"}, path), "holds no state dict"),
        (lambda path: torch.save(torch.zeros(3), path), "holds a Tensor, not a state dict"),
        (lambda path: path.write_bytes(b"PK\x03\x04" + b"\0" * 64), "not a readable torch file"),
    ],
    ids=["dict_without_tensors", "bare_tensor", "broken_zip"],
)
def test_a_pt_file_that_is_not_a_checkpoint_is_unreadable_input(tmp_path, content, problem):
    path = tmp_path / "step_10.pt"
    content(path)
    found = find_checkpoints(tmp_path)
    assert [shown for _, _, shown in found] == ["step_10.pt"]
    with pytest.raises(UnreadableInput, match=problem) as error:
        StateDictFileReader().open(path, "step_10.pt", OPTIONS)
    assert error.value.path == "step_10.pt"


def test_a_truncated_nanogpt_checkpoint_is_unreadable_input(tmp_path):
    buffer = io.BytesIO()
    torch.save({"model": {"w": torch.ones(64, 64)}, "iter_num": 5, "model_args": {}}, buffer)
    (tmp_path / "ckpt_000005.pt").write_bytes(buffer.getvalue()[:-3000])
    found = find_checkpoints(tmp_path)
    assert len(found) == 1
    reader, path, shown = found[0]
    with pytest.raises(UnreadableInput):
        reader.open(path, shown, OPTIONS)


TRAINING_ARGS_PICKLE = zipfile.ZipFile(
    RUNS / "stable" / "checkpoint-120" / "training_args.bin"
).read("training_args/data.pkl")


@settings(max_examples=300, deadline=None)
@given(
    cut=st.integers(0, len(TRAINING_ARGS_PICKLE)), flips=st.lists(st.integers(0, 10**6), max_size=4)
)
def test_the_literal_reader_survives_truncated_and_corrupted_pickles(cut, flips):
    data = bytearray(TRAINING_ARGS_PICKLE[:cut])
    for flip in flips:
        if data:
            data[flip % len(data)] ^= 0x5A
    pickle_literals(bytes(data))  # any value or None; never an exception


def test_the_real_training_args_decode_to_plain_values():
    args = torch_file_literals(RUNS / "stable" / "checkpoint-120" / "training_args.bin")
    assert isinstance(args, dict)
    assert args["optim"] == "adamw_torch_fused" and args["report_to"] == ["tensorboard"]
    assert args["max_grad_norm"] == 1.0 and args["seed"] == 1234


def test_a_pickle_describing_an_exponential_tree_is_cut_short():
    level: list[object] = []
    for _ in range(60):  # 2**60 leaves through shared references, a few kB of pickle
        level = [level, level]
    assert pickle_literals(pickle.dumps({"args": level}, protocol=2)) is None


def test_the_trust_pickle_warning_shows_a_hostile_file_name_escaped(tmp_path, capsys):
    # An ESC/BEL in the name reached the terminal raw (set the title, cleared the screen).
    from tscope.ingest.checkpoints.base import LoadOptions
    from tscope.ingest.checkpoints.safe_load import safe_torch_load

    name = "ckpt_100\x1b]0;OWNED\x07\x1b[2J.pt"
    path = tmp_path / name
    torch.save({"w": torch.ones(2)}, path)
    safe_torch_load(path, name, LoadOptions(trust_pickle=True))
    warning = capsys.readouterr().err
    assert "--trust-pickle" in warning
    assert "\x1b" not in warning and "\x07" not in warning
