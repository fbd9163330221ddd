"""Red team round 8 (session 30): deep metric-name groups, DCP and safetensors files that
describe more than they hold, and inputs that reach torch with what torch cannot handle. Each
input is the smallest that showed the problem."""

from __future__ import annotations

import json
import pickle
import shutil
import struct
from pathlib import Path
from typing import Any

import pytest
import torch

import tscope
from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.dcp import DcpReader
from tscope.ingest.checkpoints.safetensors_header import HEADER_PARSED_PER_BYTE, read_header
from tscope.ingest.logs.names import MAX_GROUP_NESTING, canonical_metric
from tscope.model.json_parse import parsed_size_estimate
from tscope.model.metric_names import LEARNING_RATE

LAYOUTS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "layouts"


def _dcp_copy(tmp_path: Path) -> tuple[Path, Any]:
    """The single-rank DCP fixture copied, with its (trusted) metadata unpickled to edit."""
    folder = tmp_path / "run" / "step_2"
    shutil.copytree(LAYOUTS / "dcp_single" / "step_2", folder)
    return folder, pickle.loads((folder / ".metadata").read_bytes())


def test_a_name_of_many_nested_groups_keeps_its_spelling() -> None:
    # Once one recursion per `opt/` group: 1,500 of them ended in RecursionError in every reader.
    deep = "opt/" * 1500 + "lr"
    assert canonical_metric(deep) == deep
    assert canonical_metric("optim/lr") == LEARNING_RATE  # real nesting still reads through
    assert canonical_metric("opt/" * (MAX_GROUP_NESTING - 1) + "lr") == LEARNING_RATE


def test_a_csv_with_a_deep_metric_name_is_analyzed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    header = "step,loss," + "lm-loss-training/" * 1200 + "x\n"
    rows = "".join(f"{i},{2.0 - i * 0.001},0.5\n" for i in range(200))
    (run / "metrics.csv").write_text(header + rows)
    case = tscope.analyze(run)
    assert json.loads(json.dumps(case.to_dict()))["summary"]["status"] == "healthy"


def test_a_dcp_shard_name_of_5000_digits_is_a_short_partial_entry(tmp_path: Path) -> None:
    # The rank in `__<digits>_0.distcp` once went to int(): ValueError past 4,300 digits.
    folder, metadata = _dcp_copy(tmp_path)
    where = next(iter(metadata.storage_data.values()))
    index = type(next(iter(metadata.storage_data)))
    name = "__" + "1" * 5000 + "_0.distcp"
    metadata.storage_data[index("model.extra", torch.Size([0]), 0)] = type(where)(
        relative_path=name, offset=0, length=1, transform_descriptors=None
    )
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    handle = DcpReader().open(folder, "step_2", LoadOptions())
    problems = [entry.problem for entry in handle.partial]
    assert any("missing" in problem for problem in problems), problems
    assert all(len(problem) < 400 for problem in problems), problems


@pytest.mark.parametrize("declared", ["bits8", "qint8", "complex32", "bool", "uint64"])
def test_a_dcp_tensor_declared_in_another_dtype_is_a_partial_entry(
    tmp_path: Path, declared: str
) -> None:
    # bits8 and qint8 once ended in NotImplementedError tracebacks (copy_ and zeros), complex32
    # printed torch's experimental-support warning, and bool or uint64 read float32 bytes as
    # another dtype's values.
    folder, metadata = _dcp_copy(tmp_path)
    key = next(k for k in metadata.state_dict_metadata if k.startswith("model."))
    metadata.state_dict_metadata[key].properties.dtype = getattr(torch, declared)
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    handle = DcpReader().open(folder, "step_2", LoadOptions())
    with pytest.raises(UnreadableInput, match=r"does not read|declares"):
        handle.load_tensor(key.removeprefix("model."))


def test_a_safetensors_header_of_empty_dicts_is_refused_before_it_is_parsed(
    tmp_path: Path,
) -> None:
    # 99 MB of `{},` took 2.5 GB in json.loads before the entry check refused it.
    count = 3_000_000
    header = b'{"w":[' + b"{}," * (count - 1) + b"{}]}"
    path = tmp_path / "model.safetensors"
    path.write_bytes(struct.pack("<Q", len(header)) + header)
    with pytest.raises(UnreadableInput, match="once parsed"):
        read_header(path, "model.safetensors")


def test_every_fixture_safetensors_header_is_within_the_parse_bound() -> None:
    files = sorted((LAYOUTS.parent).rglob("*.safetensors"))
    assert files
    for path in files:
        with path.open("rb") as handle:
            (length,) = struct.unpack("<Q", handle.read(8))
            raw = handle.read(length)
        assert parsed_size_estimate(raw) <= HEADER_PARSED_PER_BYTE * len(raw), path


def test_one_dcp_record_spelled_many_ways_is_one_file(tmp_path: Path) -> None:
    # "x", "./x", "././x": once three files to the byte budget, so a 16 MB record backed a
    # tensor 256 times its size (4 GB allocated and filled by re-reading the one record).
    from torch.distributed import checkpoint as dcp
    from torch.distributed.checkpoint.metadata import ChunkStorageMetadata, MetadataIndex

    folder = tmp_path / "run" / "step_100"
    n, k = 64, 3
    dcp.save({"model": {"w": torch.randn(n)}, "step": 100}, checkpoint_id=folder, no_dist=True)
    metadata = pickle.loads((folder / ".metadata").read_bytes())
    entry = metadata.state_dict_metadata["model.w"]
    ((index, where),) = [(i, w) for i, w in metadata.storage_data.items() if i.fqn == "model.w"]
    del metadata.storage_data[index]
    entry.size = torch.Size([k * n])
    entry.chunks = [
        ChunkStorageMetadata(offsets=torch.Size([i * n]), sizes=torch.Size([n])) for i in range(k)
    ]
    for i in range(k):
        metadata.storage_data[MetadataIndex("model.w", torch.Size([i * n]), i)] = type(where)(
            relative_path="./" * i + where.relative_path,
            offset=where.offset,
            length=where.length,
            transform_descriptors=None,
        )
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    handle = DcpReader().open(folder, "step_100", LoadOptions())
    assert any("share bytes" in entry.problem for entry in handle.partial), handle.partial
    with pytest.raises(UnreadableInput, match="no storage record"):
        handle.load_tensor("w")


def test_param_groups_of_tensors_as_torch_saves_them_are_read(tmp_path: Path) -> None:
    # torch's own dcp.save of flattened groups whose lr is a 2-element tensor: comparing the
    # groups as dicts once raised "Boolean value of Tensor ... is ambiguous".
    from torch.distributed import checkpoint as dcp

    folder = tmp_path / "step_10"
    moments = {"exp_avg": torch.zeros(4), "exp_avg_sq": torch.zeros(4), "step": torch.tensor(10.0)}
    dcp.save(
        {
            "model": {"w": torch.randn(4), "v": torch.randn(4)},
            "optim": {
                "state": {"w": dict(moments), "v": dict(moments)},
                "param_groups": {"w": {"lr": torch.ones(2)}, "v": {"lr": torch.ones(2)}},
            },
        },
        checkpoint_id=folder,
        no_dist=True,
    )
    handle = DcpReader().open(folder, "step_10", LoadOptions())
    state = handle.optimizer_state()
    assert state is not None
    assert state.param_groups == [{"lr": (1.0, 1.0)}]
    assert state.group_of == {"w": 0, "v": 0}


def test_many_failing_dcp_entries_are_counted_not_listed(tmp_path: Path) -> None:
    # 32,000 step counters with no storage record: 78 s in a quadratic membership test, 32,000
    # warning lines and partial entries (red team round 8).
    from tscope.ingest.checkpoints.evidence import MAX_ENTRIES_PER_FILE

    folder, metadata = _dcp_copy(tmp_path)
    model_key = next(k for k in metadata.state_dict_metadata if k.startswith("model."))
    template = metadata.state_dict_metadata[model_key]
    for i in range(300):
        metadata.state_dict_metadata[f"optim.state.p{i}.step"] = template
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    case = tscope.analyze(tmp_path / "run")
    entries = [p for p in case.partial if p.path.endswith("step_2")]
    assert len(entries) <= MAX_ENTRIES_PER_FILE + 1, len(entries)
    assert any("more problem(s)" in p.problem for p in entries)


def _mlflow_store(tmp_path: Path, variant: str) -> Path:
    import gzip
    import sqlite3

    root = Path(__file__).resolve().parents[1]
    store = tmp_path / variant / "mlflow.db"
    store.parent.mkdir(parents=True)
    store.write_bytes(
        gzip.decompress((root / "fixtures" / "data" / "mlflow" / "mlflow.db.gz").read_bytes())
    )
    connection = sqlite3.connect(store)
    connection.execute("DELETE FROM runs WHERE name != 'healthy'")
    ((run,),) = connection.execute("SELECT run_uuid FROM runs").fetchall()
    if variant == "schema_name":  # what a hex editor can write: a name that is not UTF-8
        connection.execute("CREATE TABLE zz(a)")
        connection.commit()
        connection.execute("PRAGMA writable_schema = ON")
        connection.execute(
            "UPDATE sqlite_master SET name = CAST(x'7a7aff' AS TEXT), "
            "sql = 'CREATE TABLE zz(a' WHERE name = 'zz'"
        )
    else:
        connection.execute(
            "INSERT INTO metrics VALUES (CAST(x'6c6f7373ff' AS TEXT), 1.0, 1, ?, 1, 0)", (run,)
        )
    connection.commit()
    connection.close()
    return store


def test_an_mlflow_store_whose_schema_names_are_not_utf8_is_one_line(tmp_path: Path) -> None:
    # SQLite's message quoted the raw name; Python's decode of it raised UnicodeDecodeError,
    # which no `except sqlite3.Error` caught: a traceback for analyze and cluster.
    from tscope.ingest.readers.mlflow_sqlite import MlflowSqliteReader

    store = _mlflow_store(tmp_path, "schema_name")
    with pytest.raises(UnreadableInput, match="not a readable MLflow SQLite store"):
        MlflowSqliteReader().read(store, "mlflow.db")


def test_an_mlflow_metric_key_that_is_not_utf8_reads_with_replacement(tmp_path: Path) -> None:
    from tscope.ingest.readers.mlflow_sqlite import MlflowSqliteReader

    read = MlflowSqliteReader().read(_mlflow_store(tmp_path, "metric_key"), "mlflow.db")
    # Once an OperationalError for the whole store: every run of it unread.
    assert "train/loss" in {str(m) for m in read.metrics.metric.used_labels()}


def test_one_shard_named_many_ways_in_an_index_is_read_once(tmp_path: Path) -> None:
    # "m.safetensors", "./m.safetensors", ".//m.safetensors": once one read and one layer row
    # per spelling (5,000 spellings: 10,000 rows for 2 tensors).
    from safetensors.torch import save_file

    from tscope.ingest.checkpoints.evidence import read_checkpoints

    folder = tmp_path / "checkpoint-100"
    folder.mkdir()
    save_file({"model.layers.0.mlp.weight": torch.randn(64)}, str(folder / "m.safetensors"))
    spellings = ["m.safetensors", "./m.safetensors", ".//m.safetensors", "././m.safetensors"]
    weight_map = {f"alias{i}": name for i, name in enumerate(spellings)}
    (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
    (folder / "trainer_state.json").write_text(
        json.dumps({"global_step": 100, "log_history": [{"step": 1, "loss": 2.0}]})
    )
    evidence, _ = read_checkpoints(tmp_path, LoadOptions())
    assert evidence is not None
    assert len(evidence.layers) == 1, evidence.layers
