"""Red team round 7 (session 29): torch files whose pickle asks the weights_only unpickler for
what no torch.save writes (a size handed to an allocator, millions of empty dicts, a storage
claim under the class's module path), and a pickled setting that repeats one string. Each input
is the smallest that showed it; nothing here unpickles with torch before the checks refuse."""

from __future__ import annotations

import io
import json
import math
import struct
import zipfile
from pathlib import Path

import pytest

import tscope
from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.pickle_literals import LITERALS_BYTES_CEILING
from tscope.ingest.checkpoints.safe_load import safe_torch_load
from tscope.ingest.run_config import MAX_VALUE_CHARS, _flat


def _int8(value: int) -> bytes:
    return b"\x8a\x08" + value.to_bytes(8, "little")  # LONG1 of 8 bytes


def _text(value: str) -> bytes:
    raw = value.encode()
    return b"X" + struct.pack("<I", len(raw)) + raw  # BINUNICODE


def _torch_zip(pickle: bytes, records: dict[str, bytes] | None = None) -> bytes:
    """A zip laid out as torch.save writes it, records stored."""
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        entries = {"archive/data.pkl": pickle, "archive/byteorder": b"little"}
        entries |= records or {}
        entries["archive/version"] = b"3\n"
        for name, data in entries.items():
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_STORED
            archive.writestr(info, data)
    return buffer.getvalue()


def _refusal(tmp_path: Path, content: bytes) -> str:
    path = tmp_path / "step_50.pt"
    path.write_bytes(content)
    with pytest.raises(UnreadableInput) as refused:
        safe_torch_load(path, path.name, LoadOptions())
    return refused.value.problem_text


@pytest.mark.parametrize(
    "call",
    [
        b"cbuiltins\nbytearray\n(" + _int8(3_000_000_000) + b"tR",
        b"ctorch\nFloatTensor\n(" + _int8(1_000_000_000) + b"tR",
        b"ctorch.storage\nUntypedStorage\n(" + _int8(1 << 33) + b"tR",
    ],
)
def test_an_allocator_called_with_a_size_is_refused_before_torch(
    tmp_path: Path, call: bytes
) -> None:
    """A 440-byte file had torch allocate 3 GB of zeros or 4 GB of uninitialised floats, whose
    statistics were then shown."""
    pickle = b"\x80\x02}(" + _text("layer.weight") + call + b"u."
    problem = _refusal(tmp_path, _torch_zip(pickle))
    assert "with a size, which torch.save never writes" in problem


def test_an_allocator_reached_through_rebuild_from_type_is_refused(tmp_path: Path) -> None:
    pickle = (
        b"\x80\x02}(" + _text("w") + b"ctorch._tensor\n_rebuild_from_type_v2\n("
        b"cbuiltins\nbytearray\nctorch\nTensor\n(" + _int8(1 << 34) + b"t}tRu."
    )
    assert "calls builtins.bytearray with a size" in _refusal(tmp_path, _torch_zip(pickle))


def test_a_pickle_of_empty_dicts_is_refused_within_the_decoders_bound(tmp_path: Path) -> None:
    """30 MB of EMPTY_DICT opcodes took 2.4 GB and 108 s in the decoder and torch's unpickler;
    here 9 MB (past the ceiling at 72 bytes a dict, far under it for real pickles)."""
    count = LITERALS_BYTES_CEILING // 64 + 1
    problem = _refusal(tmp_path, _torch_zip(b"\x80\x02" + b"}" * count + b"."))
    assert "would build far more objects than real checkpoints do" in problem


def test_a_storage_claim_under_the_module_path_is_checked(tmp_path: Path) -> None:
    """torch names the storages of its newer dtypes `torch.storage.UntypedStorage`: a claim of
    4,096 bytes on a 16-byte record had torch read the next record (1e30s) as the tensor."""
    pickle = (
        b"\x80\x02}(" + _text("layer.weight") + b"ctorch._utils\n_rebuild_tensor_v3\n(("
        + _text("storage") + b"ctorch.storage\nUntypedStorage\n" + _text("0") + _text("cpu")
        + b"M\x00\x10tQK\x00M\x00\x04\x85K\x01\x85\x89ccollections\nOrderedDict\n)R"
        b"ctorch\nfloat32\ntRu."
    )  # fmt: skip
    records = {
        "archive/data/0": struct.pack("<4f", 1, 1, 1, 1),
        "archive/data/1": struct.pack("<1100f", *[1e30] * 1100),
    }
    problem = _refusal(tmp_path, _torch_zip(pickle, records))
    assert "claims 4096 bytes but its record holds 16" in problem


def test_a_setting_repeating_one_string_stays_bounded() -> None:
    """A 200 KB training_args.bin listing one memoized 100 kB string 20,000 times became a 2 GB
    value in case.json and a MemoryError."""
    flat = _flat({"labels": ["x" * 100_000] * 20_000, "name": "y" * 50_000, "lr": 3e-4})
    assert len(flat["labels"]) <= MAX_VALUE_CHARS + 40
    assert flat["labels"].endswith("(20000 more)]")
    assert len(flat["name"]) == MAX_VALUE_CHARS and flat["lr"] == 3e-4
    assert _flat({"a": [1, 2, "x"], "b": {"c": True}}) == {"a": "[1, 2, 'x']", "b.c": True}


def test_a_refused_checkpoint_leaves_the_run_analyzed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"step": s, "loss": 3 * math.exp(-s / 30) + 0.2} for s in range(120)]
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    pickle = b"\x80\x02}(" + _text("w") + b"ctorch\nFloatTensor\n(" + _int8(1 << 30) + b"tRu."
    (run / "step_50.pt").write_bytes(_torch_zip(pickle))
    case = tscope.analyze(run)
    assert [p.path for p in case.partial] == ["step_50.pt"]
    assert case.summary.status == "healthy"


def test_a_numpy_array_reconstructed_with_a_shape_is_refused(tmp_path: Path) -> None:
    """RNG state files admit numpy's globals; numpy pickles an array as _reconstruct(ndarray,
    (0,), b'b') and sets its bytes by BUILD, so a shape there only allocates (a 462-byte
    rng_state.pth took 987 MB)."""
    from tscope.ingest.checkpoints.rng_state import read_rng_state

    pickle = (
        b"\x80\x02cnumpy.core.multiarray\n_reconstruct\n(cnumpy\nndarray\n"
        + _int8(1 << 33)
        + b"\x85C\x01btR."
    )
    path = tmp_path / "rng_state.pth"
    path.write_bytes(_torch_zip(pickle))
    with pytest.raises(UnreadableInput) as refused:
        read_rng_state(path, path.name, LoadOptions())
    assert "with a size, which torch.save never writes" in refused.value.problem_text


def test_a_full_disk_while_writing_is_one_line(tmp_path: Path) -> None:
    """--out on a full file system ended `analyze` in a traceback (OSError 28 from the write),
    exit 1; the half-written temporary file is removed and the refusal is one UsageError."""
    import errno

    from tscope.errors import UsageError
    from tscope.output_files import replacing

    target = tmp_path / "case.md"
    refused = pytest.raises(UsageError, match=r"Cannot write .*case\.md: No space left on device")
    with refused, replacing(target) as handle:
        handle.write(b"# half")
        raise OSError(errno.ENOSPC, "No space left on device")
    assert list(tmp_path.iterdir()) == []


def test_report_lists_the_first_findings_and_counts_the_rest(tmp_path: Path) -> None:
    """`tscope report` of a crafted case.json with 200,000 findings took 173 s and 3 GB, one
    100 MB message 31 s: the report lists MAX_SHOWN_FINDINGS and cuts each text."""
    from typer.testing import CliRunner

    from tscope.cli import app
    from tscope.render.formatting import MAX_LINE_CHARS, MAX_SHOWN_FINDINGS

    run = tmp_path / "run"
    run.mkdir()
    rows = [
        {"step": s, "loss": 3 * math.exp(-s / 30) + 0.2 + (3.0 if s == 60 else 0.0)}
        for s in range(120)
    ]
    (run / "metrics.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
    case_dir = tmp_path / "case"
    runner = CliRunner()
    assert runner.invoke(app, ["analyze", str(run), "--out", str(case_dir), "-q"]).exit_code == 0
    payload = json.loads((case_dir / "case.json").read_text())
    template = payload["findings"][0]
    extra = MAX_SHOWN_FINDINGS + 5 - len(payload["findings"])
    payload["findings"] += [{**template, "id": f"X{i}", "spike_id": None} for i in range(extra)]
    payload["findings"][0]["message"] = "word " * 100_000
    (case_dir / "case.json").write_text(json.dumps(payload))
    result = runner.invoke(app, ["report", str(case_dir)])
    assert result.exit_code == 0, result.output
    markdown = (case_dir / "case.md").read_text()
    assert "5 more findings are listed in case.json." in markdown
    assert "5 more findings are listed in case.json." in (case_dir / "case.html").read_text()
    assert ("word " * (MAX_LINE_CHARS // 5)).strip()[:-5] in markdown
    assert "word " * (MAX_LINE_CHARS // 5 + 2) not in markdown
