"""A torch zip whose pickle claims more bytes for a tensor storage than the storage's record holds.

torch maps each storage as the pickle's `numel` elements from the start of its record, however
short the record is: a tensor of 200 floats over a record of 100 read the next records' zip
headers and tensors as its last 100 numbers (and statistics of them reached the case file).
Such a file is refused before torch sees it; every real save, of every storage type, still loads.
"""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import pytest
import torch
from test_hostile_torch_zips import load_problem

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.safe_load import safe_torch_loads

CLAIM = "claims 800 bytes but its record holds 400"


def with_storage_record_cut(state: dict[str, torch.Tensor], record_bytes: int) -> bytes:
    """torch.save's archive of `state` with its first storage record cut to `record_bytes`:
    data.pkl still claims the whole storage."""
    saved = io.BytesIO()
    torch.save(state, saved)
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(saved.getvalue())) as source,
        zipfile.ZipFile(buffer, "w") as archive,
    ):
        for info in source.infolist():
            payload = source.read(info)
            if info.filename.endswith("/data/0"):
                payload = payload[:record_bytes]
            archive.writestr(zipfile.ZipInfo(info.filename), payload)
    return buffer.getvalue()


def test_a_storage_claiming_more_than_its_record_is_refused(tmp_path: Path) -> None:
    # the claimed tail would be the next records' headers and the other tensor's 7s
    state = {"a": torch.arange(200, dtype=torch.float32), "b": torch.full((100,), 7.0)}
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(with_storage_record_cut(state, 400))
    problem = load_problem(path)
    assert "tensor storage '0'" in problem and CLAIM in problem, problem
    assert "reads a tensor only from its own record" in problem


def test_the_same_claim_in_memory_is_refused() -> None:
    """DCP's bytes items are torch zips read from memory: the same check applies."""
    payload = with_storage_record_cut({"a": torch.arange(200, dtype=torch.float32)}, 400)
    with pytest.raises(UnreadableInput, match=CLAIM):
        safe_torch_loads(payload, "__0_0.distcp", LoadOptions())


def test_a_record_holding_exactly_the_claim_loads(tmp_path: Path) -> None:
    path = tmp_path / "pytorch_model.bin"
    path.write_bytes(with_storage_record_cut({"a": torch.arange(200, dtype=torch.float32)}, 800))
    assert load_problem(path) == ""


@pytest.mark.parametrize(
    "dtype",
    [torch.float32, torch.bfloat16, torch.float16, torch.int64, torch.bool, torch.complex64],
)
def test_real_saves_of_every_storage_type_load(tmp_path: Path, dtype: torch.dtype) -> None:
    base = torch.ones(6, 4, dtype=dtype)
    # a view sharing the storage of a larger tensor: its claim is the whole storage
    state = {"w": base, "row": base[2], "untyped": torch.zeros(3, dtype=torch.uint8)}
    path = tmp_path / "ckpt.pt"
    torch.save(state, path)
    assert load_problem(path) == ""
