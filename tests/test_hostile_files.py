"""Hostile files and folders (issue 9 items 2, 3, 4, 9, 10): links, FIFOs, devices, control
characters in names, and output folders that are not what they seem. Every input is crafted here
at test time and analyzed by the real CLI in a child process under memory and time limits."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import pytest

from tests.hostile import run_tscope, tree_digest

# Characters that must never reach a terminal or a report raw: a newline that fakes an output
# line, a terminal escape (clear screen, colour), NUL, and the right-to-left override.
EVIL_NAME = "evil\nFAKE: all good\x1b[2J\x1b[31m\u202e"
RAW_CONTROLS = ("\x1b", "\x00", "\u202e", "\x9b")
OUTSIDE_METRIC = "zz_outside_secret_metric"

pytestmark = pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="POSIX links and FIFOs")


def write_metrics(folder: Path, metric: str = "loss", name: str = "metrics.csv") -> Path:
    """A small healthy metrics table: step, the metric, the learning rate."""
    folder.mkdir(parents=True, exist_ok=True)
    rows = [f"step,{metric},learning_rate"]
    rows += [f"{step},{2.5 + 2 * math.exp(-step / 10):.4f},0.0003" for step in range(1, 61)]
    path = folder / name
    path.write_text("\n".join(rows) + "\n")
    return path


def case_texts(case_dir: Path) -> str:
    return "".join(
        (case_dir / name).read_text(encoding="utf-8", errors="replace")
        for name in ("case.json", "case.html", "case.md")
    )


def partial_of(case_dir: Path) -> dict[str, str]:
    payload = json.loads((case_dir / "case.json").read_text(encoding="utf-8"))
    return {item["path"]: item["problem"] for item in payload["partial"]}


# Item 2: never write through a symlink.


def test_report_replaces_a_link_planted_at_case_html_instead_of_writing_through_it(tmp_path):
    write_metrics(tmp_path / "run")
    case_dir = tmp_path / "case"
    assert run_tscope("analyze", tmp_path / "run", "-o", case_dir, "-q").returncode == 0
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "bashrc").write_text("export PATH=/usr/bin\n")
    before = tree_digest(victim)
    (case_dir / "case.html").unlink()
    (case_dir / "case.html").symlink_to(victim / "bashrc")

    outcome = run_tscope("report", case_dir)

    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr
    assert tree_digest(victim) == before
    assert not (case_dir / "case.html").is_symlink()
    assert "<html" in (case_dir / "case.html").read_text(encoding="utf-8")


def test_an_output_folder_that_is_a_symlink_is_refused(tmp_path):
    write_metrics(tmp_path / "run")
    victim = tmp_path / "victim"
    victim.mkdir()
    before = tree_digest(victim)
    (tmp_path / "out").symlink_to(victim, target_is_directory=True)

    outcome = run_tscope("analyze", tmp_path / "run", "-o", tmp_path / "out")

    outcome.assert_one_line_error("symbolic link", "--out")
    assert tree_digest(victim) == before


@pytest.mark.parametrize("planted", ["runs", "runs/a"])
def test_cluster_does_not_write_its_cache_through_a_planted_link(tmp_path, planted):
    write_metrics(tmp_path / "sweep" / "a")
    write_metrics(tmp_path / "sweep" / "b")
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "notes.txt").write_text("mine\n")
    before = tree_digest(victim)
    out = tmp_path / "out"
    (out / planted).parent.mkdir(parents=True)
    (out / planted).symlink_to(victim, target_is_directory=True)

    outcome = run_tscope("cluster", tmp_path / "sweep", "-o", out, "-j", "1")

    outcome.assert_no_traceback()
    assert tree_digest(victim) == before
    if planted == "runs":  # a name tscope owns: the link is removed, a real folder made
        assert outcome.returncode == 0, outcome.stderr
        assert not (out / "runs").is_symlink()
    else:  # the run whose case folder is a link is skipped, the others analyzed
        assert outcome.returncode == 0, outcome.stderr
        assert "run a skipped" in outcome.stderr and "symbolic link" in outcome.stderr


# Item 3: nothing outside the input is read through a link inside it.


def test_a_symlinked_folder_or_file_to_outside_the_input_is_not_read(tmp_path):
    run = tmp_path / "run"
    write_metrics(run)
    outside = write_metrics(tmp_path / "outside", metric=OUTSIDE_METRIC)
    (run / "more").symlink_to(outside.parent, target_is_directory=True)
    (run / "extra.csv").symlink_to(outside)

    outcome = run_tscope("analyze", run, "-o", tmp_path / "case", "-q")

    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr
    assert OUTSIDE_METRIC not in case_texts(tmp_path / "case")
    partial = partial_of(tmp_path / "case")
    assert "symbolic link" in partial["more"] and "symbolic link" in partial["extra.csv"]


def test_a_symlink_to_the_root_folder_is_not_walked(tmp_path):
    run = tmp_path / "run"
    write_metrics(run)
    (run / "host").symlink_to("/", target_is_directory=True)

    outcome = run_tscope("analyze", run, "-o", tmp_path / "case", "-q", timeout=60)

    assert outcome.returncode == 0, outcome.stderr
    assert "symbolic link" in partial_of(tmp_path / "case")["host"]


def test_the_paths_named_on_the_command_line_may_be_links(tmp_path):
    """The user chose them: a link given as the input itself is resolved once and read."""
    write_metrics(tmp_path / "real-run")
    (tmp_path / "latest").symlink_to(tmp_path / "real-run", target_is_directory=True)

    outcome = run_tscope("analyze", tmp_path / "latest", "-o", tmp_path / "case", "-q")

    assert outcome.returncode == 0, outcome.stderr
    assert partial_of(tmp_path / "case") == {}


def test_cluster_skips_a_run_entry_linked_from_outside_the_runs_folder(tmp_path):
    sweep = tmp_path / "sweep"
    write_metrics(sweep / "a")
    write_metrics(sweep / "b")
    write_metrics(tmp_path / "elsewhere" / "c", metric=OUTSIDE_METRIC)
    (sweep / "c").symlink_to(tmp_path / "elsewhere" / "c", target_is_directory=True)
    out = tmp_path / "out"

    outcome = run_tscope("cluster", sweep, "-o", out, "-j", "1")

    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr
    assert "run c skipped" in outcome.stderr and "symbolic link" in outcome.stderr
    texts = "".join(p.read_text(errors="replace") for p in out.rglob("*") if p.is_file())
    assert OUTSIDE_METRIC not in texts
    followed = run_tscope(
        "cluster", sweep, "-o", tmp_path / "out2", "-j", "1", "-q", "--follow-run-links"
    )
    assert followed.returncode == 0, followed.stderr
    assert OUTSIDE_METRIC in (tmp_path / "out2" / "runs" / "c" / "case.json").read_text()


# Item 4: only regular files are read.


@pytest.mark.parametrize(
    "name",
    [
        "trainer_state.json",
        "events.out.tfevents.1.host",
        "other.csv",
        "train.log",
        "model_step_5.pt",
    ],
)
def test_a_fifo_named_like_a_run_file_is_skipped_without_hanging(tmp_path, name):
    run = tmp_path / "run"
    write_metrics(run)
    os.mkfifo(run / name)

    outcome = run_tscope("analyze", run, "-o", tmp_path / "case", "-q", timeout=60)

    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr
    assert "not a regular file" in partial_of(tmp_path / "case")[name]


def test_dev_zero_linked_as_an_event_file_is_refused(tmp_path):
    run = tmp_path / "run"
    write_metrics(run)
    (run / "events.out.tfevents.1.host").symlink_to("/dev/zero")

    outcome = run_tscope("analyze", run, "-o", tmp_path / "case", "-q", timeout=60)

    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr
    assert "symbolic link" in partial_of(tmp_path / "case")["events.out.tfevents.1.host"]


def test_a_device_given_on_the_command_line_is_refused_in_one_line(tmp_path):
    outcome = run_tscope("analyze", "/dev/zero", "-o", tmp_path / "case", timeout=60)

    outcome.assert_one_line_error("/dev/zero", "not a regular file")


# Item 9: control characters in names and values are shown escaped.


def test_a_file_name_with_a_newline_and_escapes_stays_one_escaped_error_line(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    (run / (EVIL_NAME + "trainer_state.json")).write_text('{"log_history": [{"loss": 1.0, "st')

    outcome = run_tscope("analyze", run, "-o", tmp_path / "case")

    outcome.assert_one_line_error("evil\\nFAKE: all good\\x1b[2J", "\\u202e")
    assert not any(char in outcome.stderr for char in RAW_CONTROLS)


def test_warnings_about_partial_input_are_escaped(tmp_path):
    run = tmp_path / "run"
    write_metrics(run)
    (run / (EVIL_NAME + "trainer_state.json")).write_text('{"log_history": [{"loss": 1.0, "st')

    outcome = run_tscope("analyze", run, "-o", tmp_path / "case")

    assert outcome.returncode == 0, outcome.stderr
    assert not any(line.startswith("FAKE") for line in outcome.stderr.splitlines())
    assert not any(char in outcome.stderr for char in RAW_CONTROLS)
    assert "evil\\nFAKE" in outcome.stderr


def test_a_csv_error_does_not_echo_raw_binary(tmp_path):
    run = tmp_path / "run"
    write_metrics(run)
    (run / "broken.csv").write_bytes(b"step,loss\n1,2.0\n2,\x1b[2J\x1b]0;pwned\x07,3,4\n\x00\x9b\n")

    outcome = run_tscope("analyze", run, "-o", tmp_path / "case")

    outcome.assert_no_traceback()
    assert not any(char in outcome.stderr for char in ("\x1b", "\x07", "\x00", "\x9b"))
    assert not any(char in case_texts(tmp_path / "case") for char in ("\x1b", "\x07", "\x00"))


def test_control_characters_in_names_and_metrics_are_escaped_in_the_case(tmp_path):
    run = tmp_path / "run"
    write_metrics(run, metric="loss_\x1b[31m\u202edrawkcab")
    (run / (EVIL_NAME + "trainer_state.json")).write_text('{"log_history": [{"loss": 1.0, "st')

    outcome = run_tscope("analyze", run, "-o", tmp_path / "case", "-q")

    assert outcome.returncode == 0, outcome.stderr
    for name in ("case.html", "case.md", "case-chart.svg"):
        text = (tmp_path / "case" / name).read_text(encoding="utf-8")
        assert not any(char in text for char in RAW_CONTROLS), name
    # In a report a newline becomes a space (a table row stays one row); the rest shows escaped.
    assert "evil FAKE: all good\\x1b[2J" in (tmp_path / "case" / "case.md").read_text("utf-8")


# Item 10: a case folder holds only what this case wrote.


def test_reusing_out_removes_what_the_previous_case_left(tmp_path):
    write_metrics(tmp_path / "run")
    case_dir = tmp_path / "case"
    assert run_tscope("analyze", tmp_path / "run", "-o", case_dir, "-q").returncode == 0
    # What an earlier analysis of a run with checkpoints left beside its case.
    (case_dir / "layers.parquet").write_bytes(b"PAR1 stale PAR1")
    (case_dir / "case-layers.svg").write_text("<svg>stale</svg>")

    outcome = run_tscope("analyze", tmp_path / "run", "-o", case_dir, "-q")

    assert outcome.returncode == 0, outcome.stderr
    assert sorted(p.name for p in case_dir.iterdir()) == [
        "case-chart.svg",
        "case.html",
        "case.json",
        "case.md",
    ]


def test_an_out_folder_holding_files_tscope_did_not_write_is_refused(tmp_path):
    write_metrics(tmp_path / "run")
    out = tmp_path / "home"
    out.mkdir()
    (out / "thesis.tex").write_text("three years of work\n")
    before = tree_digest(out)

    outcome = run_tscope("analyze", tmp_path / "run", "-o", out)

    outcome.assert_one_line_error("thesis.tex", "--out")
    assert tree_digest(out) == before


def test_the_case_folder_list_covers_every_file_a_case_writes():
    """A name missing from CASE_FOLDER_FILES would make tscope refuse its own earlier case."""
    from tscope.output_files import is_owned
    from tscope.output_writer import (
        CASE_FOLDER_FILES,
        LAYERS_TABLE,
        REPLAY_JSON,
        SAMPLES_TABLE,
        STEPS_TABLE,
    )
    from tscope.render import ALL_CHART_FILES, CASE_HTML, CASE_JSON, CASE_MD
    from tscope.replay.skip_list import SKIP_BATCHES_FILE

    names = [CASE_JSON, CASE_HTML, CASE_MD, *ALL_CHART_FILES.values(), "layers.parquet"]
    names += [REPLAY_JSON, STEPS_TABLE, LAYERS_TABLE, SAMPLES_TABLE, SKIP_BATCHES_FILE]
    assert [name for name in names if not is_owned(name, CASE_FOLDER_FILES)] == []
    assert not is_owned("thesis.tex", CASE_FOLDER_FILES)


def test_a_write_replaces_a_planted_link_and_leaves_its_target(tmp_path):
    from tscope.output_files import write_text

    target = tmp_path / "bashrc"
    target.write_text("export PATH=/usr/bin\n")
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "case.md").symlink_to(target)

    write_text(tmp_path / "out" / "case.md", "# case\n")

    assert target.read_text() == "export PATH=/usr/bin\n"
    assert (tmp_path / "out" / "case.md").read_text() == "# case\n"
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["case.md"]  # no temporary


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        ("a\nb", "a\\nb"),
        ("\x1b[2J", "\\x1b[2J"),
        ("nul\x00", "nul\\x00"),
        ("csi\x9b", "csi\\x9b"),
        ("del\x7f", "del\\x7f"),
        ("gpj\u202eexe", "gpj\\u202eexe"),
        ("iso\u2066late\u2069", "iso\\u2066late\\u2069"),
        ("line\u2028sep", "line\\u2028sep"),
        ("plain ünïcode ✓ 日本", "plain ünïcode ✓ 日本"),
    ],
)
def test_visible_shows_every_control_character_as_its_escape(raw, shown):
    from tscope.model.visible_text import visible

    assert visible(raw) == shown


def test_report_into_another_folder_refuses_foreign_files_and_a_fifo_case_json(tmp_path):
    write_metrics(tmp_path / "run")
    case_dir = tmp_path / "case"
    assert run_tscope("analyze", tmp_path / "run", "-o", case_dir, "-q").returncode == 0
    foreign = tmp_path / "home"
    foreign.mkdir()
    (foreign / "thesis.tex").write_text("mine\n")
    before = tree_digest(foreign)

    refused = run_tscope("report", case_dir, "-o", foreign)

    refused.assert_one_line_error("thesis.tex")
    assert tree_digest(foreign) == before
    fifo_case = tmp_path / "fifo-case"
    fifo_case.mkdir()
    os.mkfifo(fifo_case / "case.json")
    run_tscope("report", fifo_case, timeout=60).assert_one_line_error("not a regular file")


def test_cluster_reads_a_run_entry_that_links_inside_the_runs_folder(tmp_path):
    sweep = tmp_path / "sweep"
    write_metrics(sweep / "a")
    write_metrics(sweep / "b")
    (sweep / "latest").symlink_to(sweep / "b", target_is_directory=True)

    outcome = run_tscope("cluster", sweep, "-o", tmp_path / "out", "-j", "1")

    assert outcome.returncode == 0, outcome.stderr
    assert "skipped" not in outcome.stderr
    assert (tmp_path / "out" / "runs" / "latest" / "case.json").is_file()
