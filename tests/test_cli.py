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


def test_a_log_read_whole_without_points_is_named_not_called_missing(tmp_path):
    """An event file with no scalar in it (a writer opened and closed) was read, not absent."""
    tensorboard = pytest.importorskip("torch.utils.tensorboard")
    tensorboard.SummaryWriter(log_dir=str(tmp_path)).close()
    (events,) = tmp_path.glob("events.out.tfevents.*")
    for target in (tmp_path, events):
        result = invoke("analyze", str(target))
        assert result.exit_code == 2
        (line,) = result.stderr.strip().splitlines()
        assert f"{events.name} was read but holds no logged points" in line


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


# The CLI surface, frozen: each command's parameters and the placeholder its help shows. Change
# it deliberately, together with the README's command table and docs (CONTRACT.md).
CLI_SURFACE = {
    "analyze": {
        "PATH...": "PATH...",
        "--out": "DIR",
        "--format": "FORMATS",
        "--fail-on": "SEVERITY",
        "--trust-pickle": None,
        "--no-weights": None,
        "--run": "NAME_OR_ID",
        "--quiet": None,
    },
    "replay": {
        "RUN_DIR": "RUN_DIR",
        "--around": "STEP",
        "--entry": "FILE.py",
        "--window": "-A:B",
        "--device": "DEVICE",
        "--what-if": "WHAT_IF",
        "--check-resume": None,
        "--relaxed": None,
        "--no-stats": None,
        "--nproc": "N",
        "--out": "DIR",
        "--format": "FORMATS",
        "--trust-pickle": None,
        "--quiet": None,
    },
    "cluster": {
        "RUNS_DIR": "RUNS_DIR",
        "--out": "DIR",
        "--format": "FORMATS",
        "--jobs": "N",
        "--trust-pickle": None,
        "--no-weights": None,
        "--follow-run-links": None,
        "--engine": "ENGINE",
        "--scheduler": "ADDRESS",
        "--quiet": None,
    },
    "report": {"CASE_DIR": "CASE_DIR", "--format": "FORMATS", "--out": "DIR"},
    "demo": {"--out": "DIR", "--quiet": None},
    "xray": {
        "RUN_DIR": "RUN_DIR",
        "--entry": "FILE.py",
        "--lengths": "N,N,...",
        "--out": "DIR",
        "--format": "FORMATS",
        "--quiet": None,
    },
}


def test_the_command_surface_is_what_the_readme_documents():
    import typer

    from tscope.cli import app

    group = typer.main.get_command(app)
    surface = {
        name: {
            (param.metavar if param.param_type_name == "argument" else param.opts[0]): (
                param.metavar
            )
            for param in command.params
        }
        for name, command in group.commands.items()  # type: ignore[attr-defined]
    }
    assert surface == CLI_SURFACE
    assert [param.opts for param in group.params] == [["--version"]]


def test_version_prints_the_name_and_version():
    from tscope import __version__

    result = invoke("--version")
    assert result.exit_code == 0 and result.stdout == f"tscope {__version__}\n"


def plain_help(*args: str) -> str:
    """--help as one line of words: rich's box characters and line wrapping removed."""
    text = runner.invoke(app, [*args, "--help"], prog_name="tscope", env={"COLUMNS": "100"}).output
    return " ".join(text.replace("│", " ").replace("╭", " ").replace("╰", " ").split())


@pytest.mark.parametrize(
    ("command", "usage"),
    [
        ("analyze", "Usage: tscope analyze [OPTIONS] PATH..."),
        ("replay", "Usage: tscope replay [OPTIONS] [RUN_DIR]"),
        ("cluster", "Usage: tscope cluster [OPTIONS] RUNS_DIR"),
        ("report", "Usage: tscope report [OPTIONS] CASE_DIR"),
        ("demo", "Usage: tscope demo [OPTIONS]"),
        ("xray", "Usage: tscope xray [OPTIONS] [RUN_DIR]"),
    ],
)
def test_help_placeholders_read_like_what_you_type(command, usage):
    text = plain_help(command)
    assert usage in text
    # No Python types (<bool>, <list[Path]>, <path>) and no {paths}... placeholders.
    assert "<" not in text and "{" not in text and "list[" not in text
    assert "<" not in plain_help() and "{" not in plain_help()


def test_replay_help_marks_what_is_required_and_says_it_writes_a_new_folder():
    text = plain_help("replay")
    assert "--around STEP Required (unless --check-resume)" in text
    assert "--entry FILE.py Required: your entry file" in text
    assert "build_optimizer(model)" in text  # the entry help is not cut off
    assert "updates case" not in text and "write a new case folder" in text


@pytest.mark.parametrize("command", ["analyze", "cluster", "replay", "report", "demo", "xray"])
def test_every_command_has_help(command):
    result = invoke(command, "--help")
    assert result.exit_code == 0 and "Usage" in result.output


def test_help_imports_neither_torch_nor_sklearn():
    probe = "import sys; from tscope.cli import app; print('torch' in sys.modules, 'sklearn' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_the_replay_console_line_explains_a_difference_above_tolerance_by_the_logs_rounding() -> (
    None
):
    """The demo replay reproduces at 1.88e-5 > 1e-5 because train.log keeps 4 decimals: the
    console must say why in the same line, not print what reads as a contradiction."""
    from tscope.cli_audit import _rounding_note
    from tscope.model.replay import Fidelity

    rounded = Fidelity(9, 5e-5, 1.88e-5, True, 1e-5, logged_decimals=4)
    assert (
        _rounding_note(rounded)
        == ", above the 1e-5 tolerance only by the log's rounding to 4 decimals"
    )
    within = Fidelity(9, 0.0, 2e-7, True, 1e-5, logged_decimals=4)
    failed = Fidelity(9, 0.1, 0.04, False, 1e-5, logged_decimals=4)
    assert _rounding_note(within) == "" and _rounding_note(failed) == ""
