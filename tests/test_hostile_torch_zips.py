"""torch zips that Python's zipfile and torch's reader (miniz) read differently (red-team wave 3).

Every check tscope makes on a zip-format `.pt` goes through zipfile, and torch.load went on
where zipfile failed: a data.pkl with a wrong CRC-32, a local header whose name differs from the
central directory's, or a corrupt extra field on another entry hid a million-deep tuple from the
nesting walk (SIGSEGV inside torch.load) and let a deflated data.pkl of 1.17 MB unpack to 1.2 GB.
Each is now refused before torch sees it. Separately, the walk that checks every loaded tensor
built the text path of every value: a chain of dicts keyed by one memoized 1000-character string
cost depth² (27 KB of pickle: 9 s; 102 KB: over a minute).

The crafted zips are small (a 10,000-deep tuple, a few MB of deflate) and refused before torch
reads them, so they are loaded in this process; the CLI test runs in a child (tests/hostile.py).
"""

from __future__ import annotations

import io
import struct
import zipfile
from pathlib import Path

import pytest
import torch
from hostile import run_tscope
from test_hostile_checkpoints import case_partial, write_metrics

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.pickle_decoder import MAX_TUPLE_NESTING
from tscope.ingest.checkpoints.pickle_nesting import UnreadableZip, torch_pickles_nest_too_deep
from tscope.ingest.checkpoints.safe_load import (
    MAX_CONTAINER_NESTING,
    safe_torch_load,
    tensor_backing_problem,
)

OPTIONS = LoadOptions()
DAMAGED = "not a readable torch file (a damaged or unsupported zip: "
PROTO_2 = b"\x80\x02"
DEEP = 10_000  # far past MAX_TUPLE_NESTING; a million is what crashed, this shows the refusal


def deep_tuple_value(depth: int) -> bytes:
    """{((...((),)...),): 1}: EMPTY_DICT, EMPTY_TUPLE, `depth` x TUPLE1, 1, SETITEM, STOP."""
    return PROTO_2 + b"})" + b"\x85" * depth + b"K\x01s."


def torch_zip(
    data_pkl: bytes, *, deflate_pickle: bool = False, corrupt_extra: bool = False
) -> bytes:
    """torch.save's own archive with data.pkl replaced (its tensor records dropped), as the
    red-team built them: corrupt_extra gives the `version` entry an extra field declaring 64
    bytes it does not hold (zipfile refuses the archive, miniz reads it)."""
    saved = io.BytesIO()
    torch.save({"w": torch.zeros(4)}, saved)
    buffer = io.BytesIO()
    with (
        zipfile.ZipFile(io.BytesIO(saved.getvalue())) as source,
        zipfile.ZipFile(buffer, "w") as archive,
    ):
        for info in source.infolist():
            if "/data/" in info.filename:
                continue
            entry = zipfile.ZipInfo(info.filename)
            if info.filename.endswith("data.pkl"):
                entry.compress_type = zipfile.ZIP_DEFLATED if deflate_pickle else zipfile.ZIP_STORED
                archive.writestr(entry, data_pkl)
                continue
            if corrupt_extra and info.filename.endswith("version"):
                entry.extra = struct.pack("<HH", 0x9999, 64)
            archive.writestr(entry, source.read(info))
    return buffer.getvalue()


def with_wrong_crc(payload: bytes) -> bytes:
    """data.pkl's CRC-32 changed everywhere the archive records it (local header, directory)."""
    info = _data_pkl_info(payload)
    return payload.replace(struct.pack("<I", info.CRC), struct.pack("<I", info.CRC ^ 0xDEADBEEF))


def with_renamed_local_header(payload: bytes) -> bytes:
    """data.pkl's local header names `archive/data.pkX`; the central directory still says
    `archive/data.pkl`, which is the name miniz looks up before reading at the header."""
    info = _data_pkl_info(payload)
    start = info.header_offset
    name_length = struct.unpack("<H", payload[start + 26 : start + 28])[0]
    last = start + 30 + name_length - 1
    return payload[:last] + b"X" + payload[last + 1 :]


def _data_pkl_info(payload: bytes) -> zipfile.ZipInfo:
    with zipfile.ZipFile(io.BytesIO(payload)) as archive:
        return next(i for i in archive.infolist() if i.filename.endswith("data.pkl"))


def load_problem(path: Path) -> str:
    """The problem safe_torch_load reports for the file ('' if it loads)."""
    try:
        safe_torch_load(path, path.name, OPTIONS)
    except UnreadableInput as error:
        return f"{error.problem}. {error.hint}" if error.hint else error.problem
    return ""


DAMAGED_ZIPS = {
    "wrong_crc": lambda: with_wrong_crc(torch_zip(deep_tuple_value(DEEP))),
    "renamed_local_header": lambda: with_renamed_local_header(torch_zip(deep_tuple_value(DEEP))),
    "corrupt_extra_field": lambda: torch_zip(deep_tuple_value(DEEP), corrupt_extra=True),
    # 8 MB of one string in ~8 KB of deflate: the 1.2 GB bomb, smaller.
    "deflate_bomb_behind_corrupt_extra": lambda: torch_zip(
        PROTO_2 + b"X" + struct.pack("<I", 8 << 20) + b"A" * (8 << 20) + b".",
        deflate_pickle=True,
        corrupt_extra=True,
    ),
}


@pytest.mark.parametrize("kind", sorted(DAMAGED_ZIPS))
def test_a_zip_zipfile_cannot_read_is_refused_before_torch_sees_it(tmp_path, kind):
    path = tmp_path / "model_100.pt"
    path.write_bytes(DAMAGED_ZIPS[kind]())
    problem = load_problem(path)
    assert problem.startswith(DAMAGED), problem  # before: torch.load ran (SIGSEGV at 1e6 deep)
    assert "re-save it with torch.save" in problem


def test_the_nesting_walk_raises_on_a_zip_it_cannot_read_instead_of_answering_no(tmp_path):
    payload = with_wrong_crc(torch_zip(deep_tuple_value(DEEP)))
    with pytest.raises(UnreadableZip, match="CRC"):  # before: False, and torch.load went on
        torch_pickles_nest_too_deep(io.BytesIO(payload), len(payload))
    intact = torch_zip(deep_tuple_value(DEEP))
    assert torch_pickles_nest_too_deep(io.BytesIO(intact), len(intact))


def test_a_deflated_data_pkl_is_refused_as_compressed(tmp_path):
    path = tmp_path / "model_100.pt"
    string = PROTO_2 + b"X" + struct.pack("<I", 1 << 20) + b"A" * (1 << 20) + b"."
    path.write_bytes(torch_zip(string, deflate_pickle=True))
    assert "zip records are compressed or larger than the file" in load_problem(path)


def test_a_second_central_directory_is_refused(tmp_path):
    """zipfile, given a directory offset that is not where the directory ends, assumes bytes
    were prepended and reads the directory before the end record; miniz reads at the offset.
    Two directories would show each reader its own archive."""
    payload = torch_zip(PROTO_2 + b"}.")
    with zipfile.ZipFile(io.BytesIO(payload)) as archive:
        directory = archive.start_dir
    # A copy of the directory ahead of the real one: the end record still declares the first
    # copy's offset (miniz reads it), zipfile reads the copy that ends at the end record.
    end = payload.rindex(b"PK\x05\x06")
    record = bytearray(payload[:directory] + payload[directory:end] + payload[directory:])
    assert struct.unpack_from("<I", record, len(record) - 22 + 16)[0] == directory
    path = tmp_path / "model_100.pt"
    path.write_bytes(bytes(record))
    problem = load_problem(path)
    assert problem.startswith(DAMAGED) and "not where its end record says" in problem, problem


def test_real_torch_saves_still_load(tmp_path):
    state = {
        "model": {"layers": [{"w": torch.randn(3, 2), "b": torch.zeros(2)}]},
        "optimizer": {"state": {0: {"exp_avg": torch.ones(2)}}, "param_groups": [{"lr": 1e-3}]},
        "step": 100,
    }
    path = tmp_path / "ckpt.pt"
    torch.save(state, path)
    loaded = safe_torch_load(path, path.name, OPTIONS)
    assert torch.equal(loaded["model"]["layers"][0]["w"], state["model"]["layers"][0]["w"])
    # A large tensor's record is not read again for its CRC-32; it still loads whole.
    torch.save({"big": torch.arange(1 << 20, dtype=torch.float32)}, path)
    assert safe_torch_load(path, path.name, OPTIONS)["big"][-1] == (1 << 20) - 1


def dict_chain(depth: int, key: str, leaf: object) -> dict[str, object]:
    """{key: {key: ... {key: leaf}}}, `depth` dicts, every level keyed by the same string (one
    memoized string in the red-team's pickle)."""
    chain: dict[str, object] = {key: leaf}
    for _ in range(depth - 1):
        chain = {key: chain}
    return chain


def test_a_deep_chain_of_dicts_keyed_by_a_long_string_is_refused_for_depth():
    # 5,000 levels of a 1000-character key: the red-team's 27 KB file, 9 s in the path strings.
    problem = tensor_backing_problem(dict_chain(5_000, "A" * 1000, torch.zeros(1)))
    assert f"nests containers more than {MAX_CONTAINER_NESTING} deep" in problem
    assert len(problem) < 2_000  # the path is cut, not 100 x 1000 characters
    allowed = dict_chain(MAX_CONTAINER_NESTING, "k", torch.zeros(1))
    assert tensor_backing_problem(allowed) == ""


def test_a_view_deep_under_long_keys_is_named_by_a_short_path():
    view = torch.ones(1).expand(1 << 20)
    problem = tensor_backing_problem(dict_chain(50, "B" * 1000, view))
    assert problem.startswith("tensor BBBB") and "is a view of" in problem
    assert "…" in problem and len(problem) < 2_000  # before: 50 keys of 1000 characters
    assert tensor_backing_problem({"model": [{"w": view}]}).startswith("tensor model[0].w ")


def mk_deep_pt2(depth: int, key_chars: int) -> bytes:
    """The red-team's chain as a torch zip: `depth` dicts, each keyed by the first one's key
    (memo 0), closed by SETITEMS from the inside out."""
    key = b"A" * key_chars
    pickled = PROTO_2 + b"}(X" + struct.pack("<I", key_chars) + key + b"q\x00"
    pickled += b"}(h\x00" * (depth - 1) + b"}" + b"u" * depth + b"."
    return torch_zip(pickled)


@pytest.mark.slow
def test_the_cli_lists_each_crafted_zip_as_partial(tmp_path):
    run = tmp_path / "run"
    write_metrics(run)
    names = {}
    for step, kind in enumerate(sorted(DAMAGED_ZIPS), start=1):
        names[kind] = f"model_{step * 10}.pt"
        (run / names[kind]).write_bytes(DAMAGED_ZIPS[kind]())
    (run / "model_90.pt").write_bytes(mk_deep_pt2(5_000, 1000))  # before: 9 s in the walk
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "--out", out, cwd=tmp_path)
    outcome.assert_no_traceback()  # a million deep, the crash was SIGSEGV (returncode -11)
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    partial = case_partial(out)
    for name in names.values():
        assert partial[name].startswith(DAMAGED), partial
    assert f"more than {MAX_CONTAINER_NESTING} deep" in partial["model_90.pt"]
    assert DEEP > MAX_TUPLE_NESTING
