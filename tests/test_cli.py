"""The command line: exit codes of the contract, one-line errors, no traceback, light --help."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tscope.cli import app

RUNS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "trainer"
runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args))


def test_analyze_writes_three_files_and_prints_the_case_path(tmp_path):
    result = invoke("analyze", str(RUNS / "lr_jump"), "--out", str(tmp_path / "case"), "-q")
    assert result.exit_code == 0, result.output
    assert result.stdout.strip() == str(tmp_path / "case" / "case.html")
    assert {p.name for p in (tmp_path / "case").iterdir()} >= {"case.html", "case.md", "case.json"}


def test_fail_on_exits_1_only_when_a_finding_reaches_the_severity(tmp_path):
    incident = invoke(
        "analyze", str(RUNS / "lr_jump"), "-o", str(tmp_path / "a"), "--fail-on", "warning", "-q"
    )
    healthy = invoke(
        "analyze", str(RUNS / "stable"), "-o", str(tmp_path / "b"), "--fail-on", "warning", "-q"
    )
    assert (incident.exit_code, healthy.exit_code) == (1, 0)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["analyze", "/no/such/run"], "does not exist"),
        (["analyze", "{empty}"], "holds no files"),
        (["analyze", "{garbage}"], "No supported log"),
        (["analyze", str(RUNS / "stable"), "--format", "pdf"], "Unknown format"),
        (["analyze", str(RUNS / "stable"), "--fail-on", "panic"], "--fail-on"),
        (
            ["analyze", str(RUNS / "stable"), "--out", str(RUNS / "stable" / "case")],
            "never writes into an input",
        ),
        (["report", "{empty}"], "case.json"),
    ],
)
def test_bad_input_is_one_line_on_stderr_and_exit_2(tmp_path, args, needle):
    (tmp_path / "empty").mkdir()
    (tmp_path / "garbage").mkdir()
    (tmp_path / "garbage" / "notes.bin").write_bytes(b"\x00\xff" * 100)
    args = [a.format(empty=tmp_path / "empty", garbage=tmp_path / "garbage") for a in args]
    result = invoke(*args)
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in result.output


def test_only_unreadable_files_is_exit_2_naming_the_file(tmp_path):
    (tmp_path / "trainer_state.json").write_text('{"log_history": [{"loss": 1.0, "st')
    result = invoke("analyze", str(tmp_path))
    assert result.exit_code == 2 and "trainer_state.json" in result.stderr


def test_report_rerenders_identically_from_case_json(tmp_path):
    case_dir = tmp_path / "case"
    assert (
        invoke("analyze", str(RUNS / "corrupted_batch"), "-o", str(case_dir), "-q").exit_code == 0
    )
    first = {p.name: p.read_bytes() for p in case_dir.iterdir()}
    (case_dir / "case.html").unlink()
    assert invoke("report", str(case_dir), "--format", "html,md").exit_code == 0
    assert {p.name: p.read_bytes() for p in case_dir.iterdir()} == first
    assert json.loads(first["case.json"])["schema_version"] == "1"


def test_the_command_surface_is_what_the_readme_documents():
    from tscope.cli import app

    names = sorted(command.name or command.callback.__name__ for command in app.registered_commands)
    assert names == ["analyze", "cluster", "demo", "replay", "report", "xray"]


@pytest.mark.parametrize("command", ["analyze", "cluster", "replay", "report", "demo", "xray"])
def test_every_command_has_help(command):
    result = invoke(command, "--help")
    assert result.exit_code == 0 and "Usage" in result.output


def test_help_imports_neither_torch_nor_sklearn():
    probe = "import sys; from tscope.cli import app; print('torch' in sys.modules, 'sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]
