"""Red-team findings: safetensors entries sharing bytes, config.json `architectures` naming
something that is not a model, and run names that reach the terminal or a table cell raw.

- 10,000 header entries all naming the same 16 MB made the statistics scan read each one
  (160 GB from a 17 MB file); the safetensors library refuses such headers, tscope now does too.
- `"architectures": ["__version__"]` or `["Trainer"]` ended `tscope xray` in a traceback
  (`inspect.signature` of something with no `forward`).
- A run folder named with ESC[31m and U+202E was echoed raw in "tscope: writing to ...", and a
  metric name holding a newline broke its case.html summary cell.
"""

from __future__ import annotations

import json
import pickle
import re
import struct
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import save_file
from typer.testing import CliRunner

from tscope.cli import app
from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.safetensors_header import read_header

runner = CliRunner()


def write_safetensors(path: Path, entries: dict[str, list[int]], data_bytes: int) -> Path:
    """A file whose header is written as given: F32 entries, name -> [start, end] offsets."""
    header: dict[str, Any] = {"__metadata__": {"step": "5"}}
    for name, (start, end) in entries.items():
        header[name] = {"dtype": "F32", "shape": [(end - start) // 4], "data_offsets": [start, end]}
    raw = json.dumps(header).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"\0" * data_bytes)
    return path


def write_metrics(run: Path) -> None:
    run.mkdir(parents=True, exist_ok=True)
    rows = "".join(f"{step},{3 - step * 0.01:.4f}\n" for step in range(1, 61))
    (run / "metrics.csv").write_text("step,loss\n" + rows)


@pytest.mark.parametrize(
    ("entries", "data_bytes", "problem"),
    [
        # the red-team file in small: every entry names the same bytes
        ({f"layers.{i}.w": [0, 16] for i in range(50)}, 16, "overlaps the tensor before it"),
        ({"a": [0, 16], "b": [8, 24]}, 24, "overlaps the tensor before it"),
        (
            {"a": [0, 16], "b": [20, 36]},
            36,
            "leaves a gap (starts at data byte 20, the bytes before it end at 16)",
        ),
        (
            {"a": [4, 20]},
            20,
            "leaves a gap (starts at data byte 4, the bytes before it end at 0)",
        ),  # not from byte 0
        ({"a": [0, 16]}, 32, "its tensors cover 16 of the 32 data bytes"),  # trailing bytes
        ({}, 8, "its tensors cover 0 of the 8 data bytes"),
    ],
)
def test_entries_that_do_not_tile_the_data_are_refused(tmp_path, entries, data_bytes, problem):
    path = write_safetensors(tmp_path / "model.safetensors", entries, data_bytes)
    with pytest.raises(UnreadableInput) as refused:
        read_header(path, "ckpt/model.safetensors")
    message = str(refused.value)
    assert "ckpt/model.safetensors" in message
    assert "not a readable safetensors file" in message
    assert problem in message


def test_library_written_files_and_any_header_order_still_read(tmp_path):
    """save_file orders by dtype then name and places zero-byte tensors at a neighbour's start;
    a header listing entries out of offset order is valid too (the library sorts them)."""
    path = tmp_path / "lib.safetensors"
    tensors = {
        "a": torch.ones(3, 2),
        "b": torch.zeros(5, dtype=torch.bfloat16),
        "empty": torch.empty(0, 4),
        "c": torch.arange(3, dtype=torch.int64),
        "u": torch.ones(3, dtype=torch.uint8),
    }
    save_file(tensors, str(path), metadata={"step": "7"})
    header = read_header(path, "lib.safetensors")
    assert {entry.name for entry in header.entries} == set(tensors)
    shuffled = write_safetensors(tmp_path / "order.safetensors", {"b": [16, 32], "a": [0, 16]}, 32)
    assert [entry.name for entry in read_header(shuffled, "order").entries] == ["b", "a"]


def test_analyze_lists_an_overlapping_checkpoint_as_partial(tmp_path):
    run = tmp_path / "run"
    write_metrics(run)
    write_safetensors(
        run / "step_5.safetensors", {f"layers.{i}.mlp.weight": [0, 64] for i in range(20)}, 64
    )
    out = tmp_path / "out"
    result = runner.invoke(app, ["analyze", str(run), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    partial = {
        p["path"]: p["problem"] for p in json.loads((out / "case.json").read_text())["partial"]
    }
    assert "overlaps the tensor before it" in partial["step_5.safetensors"]


@pytest.mark.parametrize("architecture", ["__version__", "Trainer", "logging", "no such model"])
def test_xray_architectures_that_are_not_models_get_the_note(tmp_path, architecture):
    pytest.importorskip("transformers")
    from tscope.xray.trainer_run import read_settings

    run = tmp_path / "run"
    run.mkdir()
    (run / "training_args.bin").write_bytes(pickle.dumps({"seed": 3}, protocol=2))
    (run / "config.json").write_text(json.dumps({"architectures": [architecture]}))
    settings, notes = read_settings(run)  # an AttributeError traceback before
    assert settings.model_accepts_loss_kwargs is True
    assert f"Model class {architecture} is not a transformers model" in " ".join(notes)


def test_xray_still_reads_a_real_model_class(tmp_path):
    pytest.importorskip("transformers")
    from tscope.xray.trainer_run import read_settings

    run = tmp_path / "run"
    run.mkdir()
    (run / "training_args.bin").write_bytes(pickle.dumps({"seed": 3}, protocol=2))
    (run / "config.json").write_text(json.dumps({"architectures": ["GPT2LMHeadModel"]}))
    settings, notes = read_settings(run)
    assert settings.model_class == "GPT2LMHeadModel"
    assert any(note.startswith("Model class GPT2LMHeadModel (config.json)") for note in notes)


def test_the_default_folder_note_escapes_the_run_name(tmp_path, monkeypatch):
    run = tmp_path / "run_\x1b[31mRED\u202egpj.exe"
    write_metrics(run)
    monkeypatch.chdir(run)
    result = runner.invoke(app, ["analyze", ".", "--no-weights"])
    assert result.exit_code == 0, result.output
    assert "writing to ../tscope-case-run_\\x1b[31mRED\\u202egpj.exe" in result.stderr
    for raw in ("\x1b", "\u202e"):
        assert raw not in result.stderr and raw not in result.stdout


def test_a_metric_summary_cell_keeps_a_name_on_one_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = "".join(f"{step},{3 - step * 0.01:.4f},{1 + step % 3}\n" for step in range(1, 61))
    (run / "metrics.csv").write_text('step,loss,"nl\nFAKE: all good"\n' + rows)
    out = tmp_path / "out"
    result = runner.invoke(app, ["analyze", str(run), "--out", str(out), "-q"])
    assert result.exit_code == 0, result.output
    html = (out / "case.html").read_text()
    cells = re.findall(r"<td><code>(nl.*?)</code></td>", html, flags=re.DOTALL)
    assert cells == ["nl FAKE: all good"]
