"""Second red-team round on DCP reading (docs/security.md, DCP sections).

- An accelerate DCP folder named alone (`checkpoint-5/pytorch_model_fsdp_0`, or `optimizer_0/`)
  once read its parent's trainer_state.json, the sibling DCP folder and the RNG file names: a
  step and an Adam counter from files outside the input. Nothing above the input is read now,
  and the partial entry says what was left and which folder to name instead.
- A `.metadata` repeating one chunk by memo references (4 bytes a copy) ran torch.load once per
  copy (300,000 copies in 1.2 MB: over a minute). Chunks that repeat, overlap or share record
  bytes are refused before any load.

Every layout is written by torch's own `dcp.save`; hostile variants re-pickle its metadata.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.distributed.checkpoint as dcp
from hostile import run_tscope
from torch.distributed.checkpoint.metadata import (
    ChunkStorageMetadata,
    MetadataIndex,
    TensorStorageMetadata,
)
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
)

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints import dcp_storage
from tscope.ingest.checkpoints.base import CheckpointHandle, LoadOptions
from tscope.ingest.checkpoints.dcp import DcpReader
from tscope.ingest.checkpoints.evidence import read_checkpoints
from tscope.ingest.checkpoints.registry import find_checkpoints

OPTIONS = LoadOptions()
LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layouts"
OUTSIDE_STEP = 777777  # trainer_state.json's step: seen only when the parent folder is read


def trained_linear() -> tuple[torch.nn.Module, torch.optim.Optimizer]:
    torch.manual_seed(0)
    model = torch.nn.Linear(8, 4)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
    model(torch.randn(2, 8)).sum().backward()
    optimizer.step()
    return model, optimizer


def accelerate_checkpoint(parent: Path) -> Path:
    """accelerate's FSDP SHARDED_STATE_DICT inside a Trainer checkpoint-5/ (the red-team's)."""
    model, optimizer = trained_linear()
    checkpoint = parent / "checkpoint-5"
    dcp.save(
        {"model": get_model_state_dict(model)},
        checkpoint_id=checkpoint / "pytorch_model_fsdp_0",
        no_dist=True,
    )
    dcp.save(
        {"optimizer": get_optimizer_state_dict(model, optimizer)},
        checkpoint_id=checkpoint / "optimizer_0",
        no_dist=True,
    )
    (checkpoint / "trainer_state.json").write_text(
        json.dumps({"global_step": OUTSIDE_STEP, "log_history": []})
    )
    torch.save({"cpu": torch.get_rng_state()}, checkpoint / "rng_state_0.pth")
    return checkpoint


def opened(root: Path) -> list[CheckpointHandle]:
    """Each checkpoint under root, opened as analyze opens it (through the registry)."""
    return [reader.open(path, shown, OPTIONS) for reader, path, shown in find_checkpoints(root)]


# --- F2: nothing above the input is read ------------------------------------------------------


def test_a_model_dcp_folder_named_alone_reads_nothing_beside_it(tmp_path: Path) -> None:
    checkpoint = accelerate_checkpoint(tmp_path)
    [handle] = opened(checkpoint / "pytorch_model_fsdp_0")
    # Before: step 777777 from ../trainer_state.json and Adam moments from ../optimizer_0.
    assert handle.info.step == 5  # from the text of the path the user gave, nothing opened
    assert not handle.info.has_optimizer and handle.optimizer_state() is None
    assert not handle.info.has_rng and handle.audit().rng_ranks == ()
    assert handle.tensor_names() == ["bias", "weight"]
    [entry] = handle.partial
    assert entry.path == "pytorch_model_fsdp_0"
    assert "optimizer_0/" in entry.problem and "trainer_state.json" in entry.problem
    assert "outside the input" in entry.problem
    assert "Point tscope at checkpoint-5/ to read them" in entry.problem
    assert any("outside the input" in note for note in handle.audit().notes)
    assert not any("trainer_state" in note for note in handle.audit().notes)


def test_an_optimizer_dcp_folder_named_alone_reads_nothing_beside_it(tmp_path: Path) -> None:
    checkpoint = accelerate_checkpoint(tmp_path)
    [handle] = opened(checkpoint / "optimizer_0")
    assert handle.info.step == 5  # before: 777777, read from ../trainer_state.json
    assert not handle.info.has_rng  # before: ../rng_state_0.pth was listed
    [entry] = handle.partial
    assert entry.path == "optimizer_0"
    assert "pytorch_model_fsdp_0/" in entry.problem
    assert "Point tscope at checkpoint-5/ to read them" in entry.problem


def test_describe_reads_nothing_beside_a_dcp_folder_named_alone(tmp_path: Path) -> None:
    checkpoint = accelerate_checkpoint(tmp_path)
    [(reader, path, shown)] = find_checkpoints(checkpoint / "pytorch_model_fsdp_0")
    info = reader.describe(path, shown)
    assert info.step == 5 and not info.has_optimizer and not info.has_rng


def test_a_dcp_folder_opened_without_a_root_is_its_own_root(tmp_path: Path) -> None:
    checkpoint = accelerate_checkpoint(tmp_path)
    handle = DcpReader().open(checkpoint / "pytorch_model_fsdp_0", "pytorch_model_fsdp_0", OPTIONS)
    assert handle.info.step == 5 and not handle.info.has_optimizer


@pytest.mark.parametrize("named", ["checkpoint-5", "."])
def test_naming_the_trainer_folder_or_above_still_reads_the_whole_layout(
    tmp_path: Path, named: str
) -> None:
    checkpoint = accelerate_checkpoint(tmp_path)
    [handle] = opened(checkpoint if named == "checkpoint-5" else tmp_path)
    assert handle.info.step == OUTSIDE_STEP and handle.info.has_optimizer and handle.info.has_rng
    state = handle.optimizer_state()
    assert state is not None and state.per_param["weight"]["step"] == 1.0
    assert handle.audit().rng_ranks == (0,)
    assert handle.partial == []


def test_analyze_of_a_model_dcp_folder_alone_keeps_its_parent_out_of_the_case(
    tmp_path: Path,
) -> None:
    checkpoint = accelerate_checkpoint(tmp_path / "acc")
    out = tmp_path / "out"
    outcome = run_tscope(
        "analyze", checkpoint / "pytorch_model_fsdp_0", "--out", out, "--quiet", cwd=tmp_path
    )
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    case = (out / "case.json").read_text()
    # Before: "777777 but Adam's step counter is 1", both read from the parent folder.
    assert str(OUTSIDE_STEP) not in case
    partial = {p["path"]: p["problem"] for p in json.loads(case)["partial"]}
    assert "Point tscope at checkpoint-5/" in partial["pytorch_model_fsdp_0"]


# --- F3: chunk lists that repeat, overlap or share bytes are refused before any load ----------


@pytest.fixture
def loads(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The tensor keys of every chunk record torch.load is run on."""
    calls: list[str] = []
    real = dcp_storage._chunk_tensor

    def counted(
        folder: Path, record: Any, chunk: Any, dtype: torch.dtype, key: str, shown: str
    ) -> torch.Tensor:
        calls.append(key)
        return real(folder, record, chunk, dtype, key, shown)

    monkeypatch.setattr(dcp_storage, "_chunk_tensor", counted)
    yield calls


def rewrite_metadata(folder: Path, change: Any) -> None:
    metadata = pickle.loads((folder / ".metadata").read_bytes())  # written by dcp.save: trusted
    change(metadata)
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))


def base_checkpoint(tmp_path: Path) -> Path:
    """The red-team's mk_dcp.py: model + optimizer + step, one rank."""
    model, optimizer = trained_linear()
    folder = tmp_path / "checkpoint-100"
    state = {
        "model": get_model_state_dict(model),
        "optim": get_optimizer_state_dict(model, optimizer),
        "step": 100,
    }
    dcp.save(state, checkpoint_id=folder, no_dist=True)
    return folder


def test_a_chunk_list_repeated_by_memo_references_is_refused_before_any_load(
    tmp_path: Path, loads: list[str]
) -> None:
    folder = base_checkpoint(tmp_path)
    copies = 3000

    def repeat(metadata: Any) -> None:  # mk_dup.py: 4 bytes of pickle per copy
        for key in ("model.weight", "model.bias"):
            entry = metadata.state_dict_metadata[key]
            entry.chunks = entry.chunks * copies

    rewrite_metadata(folder, repeat)
    assert (folder / ".metadata").stat().st_size < 40_000
    metadata = dcp_storage.read_metadata(folder, "checkpoint-100", OPTIONS)
    with pytest.raises(UnreadableInput, match="3000 chunks hold more elements than its shape"):
        dcp_storage.load_tensor(folder, metadata, "model.weight", "checkpoint-100")
    assert loads == []  # before: 3000 torch.load calls for this one tensor

    # As analyze reads it: one partial entry per refused tensor, naming the folder and why.
    _, partial = read_checkpoints(tmp_path, OPTIONS)
    refused = [p for p in partial if "the chunk list repeats or overlaps" in p.problem]
    assert {p.path for p in refused} == {"checkpoint-100"}
    assert {"model.weight", "model.bias"} <= {p.problem.split()[1] for p in refused}
    assert not {"model.weight", "model.bias"} & set(loads)  # the optimizer's entries still read


def split_checkpoint(tmp_path: Path) -> tuple[Path, torch.Tensor]:
    """`model.weight` [4, 8] written by dcp.save as row blocks under other names; the tests
    point its chunks at those records, as a sharded save would."""
    weight = torch.arange(32, dtype=torch.float32).reshape(4, 8)
    folder = tmp_path / "step_3"
    blocks = {"rows01": weight[0:2], "rows12": weight[1:3], "rows23": weight[2:4]}
    dcp.save(
        {name: block.clone() for name, block in blocks.items()}, checkpoint_id=folder, no_dist=True
    )
    return folder, weight


def chunked(metadata: Any, pieces: list[tuple[int, str]]) -> None:
    """model.weight [4, 8] made of two-row chunks starting at each row, stored as each name."""
    properties = metadata.state_dict_metadata["rows01"].properties
    chunks = [
        ChunkStorageMetadata(offsets=torch.Size([row, 0]), sizes=torch.Size([2, 8]))
        for row, _ in pieces
    ]
    metadata.state_dict_metadata["model.weight"] = TensorStorageMetadata(
        properties=properties, size=torch.Size([4, 8]), chunks=chunks
    )
    records = {index.fqn: where for index, where in metadata.storage_data.items()}
    for row, name in pieces:
        index = MetadataIndex("model.weight", torch.Size([row, 0]))
        metadata.storage_data[index] = records[name]


def test_the_row_blocks_a_sharded_save_writes_still_read(tmp_path: Path, loads: list[str]) -> None:
    folder, weight = split_checkpoint(tmp_path)
    rewrite_metadata(folder, lambda metadata: chunked(metadata, [(0, "rows01"), (2, "rows23")]))
    metadata = dcp_storage.read_metadata(folder, "step_3", OPTIONS)
    assert torch.equal(dcp_storage.load_tensor(folder, metadata, "model.weight", "step_3"), weight)
    assert loads == ["model.weight", "model.weight"]


def test_overlapping_chunks_are_refused_before_any_load(tmp_path: Path, loads: list[str]) -> None:
    # Rows 0-1 and 1-2: 32 elements in all, as many as the tensor holds, but row 1 twice.
    folder, _ = split_checkpoint(tmp_path)
    rewrite_metadata(folder, lambda metadata: chunked(metadata, [(0, "rows01"), (1, "rows12")]))
    metadata = dcp_storage.read_metadata(folder, "step_3", OPTIONS)
    with pytest.raises(UnreadableInput, match="its chunks overlap"):
        dcp_storage.load_tensor(folder, metadata, "model.weight", "step_3")
    assert loads == []  # before: both loaded, row 3 left as zeros


def test_chunks_sharing_one_record_are_refused_before_any_load(
    tmp_path: Path, loads: list[str]
) -> None:
    # Two distinct chunks read from the same bytes: the bytes on disk back one chunk only.
    folder, _ = split_checkpoint(tmp_path)
    rewrite_metadata(folder, lambda metadata: chunked(metadata, [(0, "rows01"), (2, "rows01")]))
    metadata = dcp_storage.read_metadata(folder, "step_3", OPTIONS)
    with pytest.raises(UnreadableInput, match="two of its chunk records share bytes"):
        dcp_storage.load_tensor(folder, metadata, "model.weight", "step_3")
    assert loads == []


def test_every_tensor_of_the_fsdp2_fixture_reads_each_chunk_once(loads: list[str]) -> None:
    folder = LAYOUTS / "dcp_fsdp2_2ranks" / "step-4"
    metadata = dcp_storage.read_metadata(folder, "step-4", OPTIONS)
    chunks = 0
    for key, entry in metadata.tensors.items():
        tensor = dcp_storage.load_tensor(folder, metadata, key, "step-4")
        assert tuple(tensor.shape) == entry.size
        chunks += len(entry.chunks)
    assert len(loads) == chunks and chunks > len(metadata.tensors)  # two ranks' shards
