"""Second red-team round: what tscope deletes, how long a replay may run, names that are not
UTF-8, steps past 2**53 and NUL bytes in paths named inside files (docs/security.md).

Each test builds its hostile input in tmp_path and asserts on outcomes: the exit code, the one
line on stderr, the files left as they were, the partial entries of the case.
"""

from __future__ import annotations

import json
import math
import os
import pickle
import shutil
from pathlib import Path

import pytest
from hostile import run_tscope
from test_reader_wandb import frame, number_item_record

from tscope.demo.run_folder import MARKER_NAME, is_demo_file, prepare_run_dir
from tscope.errors import UnreadableInput, UsageError
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.checkpoints.dcp import DcpReader
from tscope.ingest.safe_fs import is_inside, is_real_folder, is_regular_file, open_regular
from tscope.model.visible_text import visible
from tscope.output_location import folder_name
from tscope.render.series import axis_range
from tscope.replay import replay
from tscope.replay.select import choose_checkpoint

ROOT = Path(__file__).resolve().parents[1]
TRAINER_RUNS = ROOT / "fixtures" / "data" / "trainer"
FIXTURE_ENTRY = ROOT / "fixtures" / "entries" / "trainer_fixtures.py"
LAYOUTS = ROOT / "fixtures" / "data" / "layouts"
# The last checkpoint of the corrupted_batch fixture is checkpoint-240: the run's last step is 240
# (its checkpoint holds update 240; the message once named 241, the next update's).
FIXTURE_LAST_STEP = 240


def write_metrics(folder: Path, name: str | bytes = "metrics.csv") -> None:
    """A small healthy loss log, so the run is analyzable apart from the hostile part. `name`
    may be bytes: a file name that is not UTF-8."""
    os.makedirs(folder, exist_ok=True)
    rows = "".join(f"{step},{2.5 + 2 * math.exp(-step / 10):.4f}\n" for step in range(1, 61))
    with open(os.path.join(os.fsencode(folder), os.fsencode(name)), "w") as handle:
        handle.write("step,loss\n" + rows)


def case_partial(out: Path) -> str:
    case = json.loads((out / "case.json").read_text(encoding="utf-8"))
    return "\n".join(f"{entry['path']}: {entry['problem']}" for entry in case["partial"])


# F1: the demo deletes only what it writes, and never writes through a linked --out.


def test_a_forged_demo_marker_never_gets_the_files_it_lists_deleted(tmp_path: Path) -> None:
    run = tmp_path / "X" / "run"
    run.mkdir(parents=True)
    (run / "victim.txt").write_text("data\n")
    (run / MARKER_NAME).write_text(json.dumps({"files": ["victim.txt"]}))
    # The marker's list is anyone's to write: only the demo's own names may go.
    with pytest.raises(UsageError, match=r"victim\.txt"):
        prepare_run_dir(run)
    assert (run / "victim.txt").read_text() == "data\n"
    assert (run / MARKER_NAME).exists()


def test_a_link_at_a_demo_name_is_refused_and_its_target_kept(tmp_path: Path) -> None:
    secret = tmp_path / "secret.txt"
    secret.write_text("mine\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / MARKER_NAME).write_text(json.dumps({"files": ["train.log"]}))
    (run / "train.log").symlink_to(secret)  # a demo name, but a link: not a file the demo wrote
    with pytest.raises(UsageError, match=r"train\.log"):
        prepare_run_dir(run)
    assert (run / "train.log").is_symlink() and secret.read_text() == "mine\n"


def test_an_earlier_demo_run_is_still_cleared(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    for name in (MARKER_NAME, "train.log", "metrics.jsonl", "ckpt_000050.pt", "ckpt_000300.pt"):
        (run / name).write_text("earlier demo\n")
    prepare_run_dir(run)
    assert list(run.iterdir()) == []
    assert is_demo_file("ckpt_001000.pt") and not is_demo_file("ckpt_.pt")
    assert not is_demo_file("ckpt_000050.pt.bak") and not is_demo_file("notes.txt")


def test_demo_out_naming_a_link_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    target = tmp_path / "real"
    target.mkdir()
    link = tmp_path / "L"
    link.symlink_to(target)
    outcome = run_tscope("demo", "--out", link, "--quiet", cwd=tmp_path)
    outcome.assert_one_line_error("symbolic link")
    assert list(target.iterdir()) == []


# F4: a replay window must end near the run's last logged or checkpointed step.


@pytest.mark.parametrize(
    ("around", "window"),
    [(2**63 - 1, (-5, 5)), (100, (-5, 99_999_999_999)), (1000, (-5, 5))],
)
def test_a_replay_window_past_the_last_checkpoint_is_refused_naming_it(
    around: int, window: tuple[int, int]
) -> None:
    # Replay's own validation, before any step runs (the replay itself would never finish).
    with pytest.raises(UsageError) as error:
        choose_checkpoint(TRAINER_RUNS / "corrupted_batch", around + window[0], around + window[1])
    message = str(error.value)
    assert f"step is {FIXTURE_LAST_STEP}" in message and "\n" not in message


def test_replay_refuses_a_window_past_the_run_end_before_replaying(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", "corrupted_batch")
    with pytest.raises(UsageError, match=f"step is {FIXTURE_LAST_STEP}"):
        replay(TRAINER_RUNS / "corrupted_batch", 1000, window=(-5, 5), entry=FIXTURE_ENTRY)


# The two that never finished; the in-process test above covers the third.
@pytest.mark.parametrize(
    ("around", "window"), [(str(2**63 - 1), "-5:5"), ("100", "-5:99999999999")]
)
def test_replay_cli_past_the_run_end_is_one_line_and_exit_2(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, around: str, window: str
) -> None:
    monkeypatch.setenv("TSCOPE_FIXTURE_RUN", "corrupted_batch")  # run_tscope passes it on
    out = tmp_path / "out"
    outcome = run_tscope(
        "replay",
        TRAINER_RUNS / "corrupted_batch",
        "--around",
        around,
        f"--window={window}",
        "--entry",
        FIXTURE_ENTRY,
        "-o",
        out,
        "--quiet",
        cwd=tmp_path,
    )
    outcome.assert_one_line_error(f"last logged or checkpointed step is {FIXTURE_LAST_STEP}")
    assert not (out / "case.json").exists()


# F7: names that are not UTF-8 are shown escaped, and the default folder name is sanitized.


def test_file_and_folder_names_that_are_not_utf8_are_analyzed_and_shown_escaped(
    tmp_path: Path,
) -> None:
    # A file, and a sub-folder, each in its own run (two logs in one folder are two runs).
    for run_name, name, shown in [
        ("r1", b"metrics\xff.csv", "metrics\\xff.csv"),
        ("r2", b"sub\xff/metrics.csv", "sub\\xff/metrics.csv"),
    ]:
        run = tmp_path / run_name
        folder, _, file = name.rpartition(b"/")
        write_metrics(os.path.join(os.fsencode(run), folder), file)
        out = tmp_path / f"out-{run_name}"
        outcome = run_tscope("analyze", run, "-o", out, "--quiet", cwd=tmp_path)
        outcome.assert_no_traceback()
        assert outcome.returncode == 0, outcome.stderr[-2000:]
        case = json.loads((out / "case.json").read_text(encoding="utf-8"))
        assert [source["path"] for source in case["run"]["sources"]] == [shown]
        assert shown in (out / "case.md").read_text(encoding="utf-8")


def test_a_run_folder_named_in_invalid_utf8_gets_a_printable_default_case_folder(
    tmp_path: Path,
) -> None:
    write_metrics(os.path.join(os.fsencode(tmp_path), b"\xffrun"))
    outcome = run_tscope("analyze", os.fsdecode(b"\xffrun"), "--quiet", cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert (tmp_path / "tscope-case-_run" / "case.html").is_file()
    case = json.loads((tmp_path / "tscope-case-_run" / "case.json").read_text(encoding="utf-8"))
    assert case["run"]["name"] == "\\xffrun"


def test_surrogates_are_escaped_wherever_a_name_is_shown() -> None:
    # U+DCFF is how Python holds the byte 0xff of a name that is not UTF-8.
    # Compared as ASCII bytes: a failure report holding a raw surrogate cannot even be sent
    # between pytest-xdist workers.
    assert visible("metrics\udcff.csv").encode("ascii", "backslashreplace") == b"metrics\\xff.csv"
    assert visible("lone \ud800").encode("ascii", "backslashreplace") == b"lone \\ud800"
    assert folder_name("\udcffrun").encode("ascii", "backslashreplace") == b"_run"


# F8: steps of 2**53 or more are dropped from TensorBoard and W&B logs; the chart never divides
# by a zero width.


def test_axis_ranges_near_2_63_have_a_width_in_float() -> None:
    for low, high in [(2**63 - 2, 2**63 - 1), (2**63 - 1, 2**63 - 1), (5, 5), (0, 10)]:
        x_low, x_high = axis_range(low, high)
        assert x_high - x_low > 0 and x_low <= low and x_high >= high


def test_tensorboard_steps_beyond_2_53_are_dropped_and_listed(tmp_path: Path) -> None:
    events = pytest.importorskip("tensorboard_events")
    run = tmp_path / "run"
    run.mkdir()
    normal = [events.scalar_event(step, ("train/loss", 2.0 - step / 100)) for step in range(60)]
    huge = [events.scalar_event(2**63 - 1 - i, ("train/loss", 5.0)) for i in range(10)]
    events.write_events(run, normal + huge)
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "-o", out, "--quiet", cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert "10 scalar points skipped: their step is beyond 2**53" in case_partial(out)

    only_huge = tmp_path / "only"
    only_huge.mkdir()
    events.write_events(only_huge, huge)
    outcome = run_tscope("analyze", only_huge, "-o", tmp_path / "out2", "--quiet", cwd=tmp_path)
    outcome.assert_one_line_error("beyond 2**53")


def test_wandb_offline_steps_beyond_2_53_are_dropped_and_listed(tmp_path: Path) -> None:
    run = tmp_path / "run"
    log = run / "wandb" / "offline-run-20240101_000000-abc" / "run-abc.wandb"
    log.parent.mkdir(parents=True)
    records = [number_item_record(step, "loss", 2.0 - step / 100) for step in range(60)]
    records += [number_item_record(2**63 - 1 - i, "loss", 5.0) for i in range(10)]
    log.write_bytes(frame(records))
    out = tmp_path / "out"
    outcome = run_tscope("analyze", run, "-o", out, "--quiet", cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert "10 history row(s) skipped: their step is beyond 2**53" in case_partial(out)


# F9: a NUL byte in a path named inside a file is "not a usable path", never a traceback.


def test_the_safe_fs_helpers_take_a_nul_byte_for_an_unusable_path(tmp_path: Path) -> None:
    nul = tmp_path / "a\x00../b"
    assert not is_inside(tmp_path, nul)
    assert not is_regular_file(nul) and not is_real_folder(nul)
    with pytest.raises(UnreadableInput, match="NUL"):
        open_regular(nul, "a\\x00../b")


def test_a_dcp_relative_path_with_a_nul_byte_is_a_partial_entry(tmp_path: Path) -> None:
    folder = tmp_path / "run" / "step_2"
    shutil.copytree(LAYOUTS / "dcp_single" / "step_2", folder)
    metadata = pickle.loads((folder / ".metadata").read_bytes())  # the fixture: trusted
    for index, where in metadata.storage_data.items():
        if index.fqn == "model.emb.weight":
            where.relative_path = "__0_0.distcp\x00../x"
    (folder / ".metadata").write_bytes(pickle.dumps(metadata))
    handle = DcpReader().open(folder, "step_2", LoadOptions())
    assert any("distcp\\x00" in entry.problem for entry in handle.partial), handle.partial

    write_metrics(tmp_path / "run")
    out = tmp_path / "out"
    outcome = run_tscope("analyze", tmp_path / "run", "-o", out, "--quiet", cwd=tmp_path)
    outcome.assert_no_traceback()
    assert outcome.returncode == 0, outcome.stderr[-2000:]
    assert "distcp\\x00" in case_partial(out)
