"""Files and folders swapped while tscope reads the input (red team, session 27): a sub-folder
replaced by a link after discovery judged it, and a checkpoint replaced by a link or a FIFO
between tscope's checks and torch.load. Nothing outside the input may be read, nothing may hang."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints import safe_load
from tscope.ingest.checkpoints.base import LoadOptions
from tscope.ingest.discover import FOLDER_CHANGED, iter_files
from tscope.ingest.safe_fs import REACHED_THROUGH_LINK, open_regular, reading_under


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    root, outside = tmp_path / "run", tmp_path / "outside"
    (root / "zsub").mkdir(parents=True)
    outside.mkdir()
    (root / "a.csv").write_text("step,loss\n1,2\n")
    (root / "zsub" / "inner.csv").write_text("step,ok\n1,1\n")
    (outside / "secret.csv").write_text("step,SECRET\n1,42\n")
    return root, outside


def _swap_for_link(folder: Path, target: Path) -> None:
    folder.rename(folder.with_name(folder.name + ".real"))
    folder.symlink_to(target, target_is_directory=target.is_dir())


def test_a_sub_folder_swapped_for_a_link_after_its_parent_was_listed_is_not_listed(
    tmp_path: Path,
) -> None:
    root, outside = _tree(tmp_path)
    skipped: list[tuple[Path, str]] = []
    files = iter_files(root, lambda path, why: skipped.append((path, why)))
    assert next(files) == root / "a.csv"  # the root is listed; zsub waits its turn
    _swap_for_link(root / "zsub", outside)
    assert list(files) == []
    assert skipped == [(root / "zsub", FOLDER_CHANGED)]


def test_a_file_reached_through_a_folder_now_a_link_is_refused(tmp_path: Path) -> None:
    root, outside = _tree(tmp_path)
    (outside / "inner.csv").write_text("step,SECRET\n1,42\n")
    with reading_under([root]):
        with open_regular(root / "zsub" / "inner.csv", "zsub/inner.csv") as handle:
            assert b"ok" in handle.read()
        _swap_for_link(root / "zsub", outside)
        with pytest.raises(UnreadableInput, match="reached through a folder"):
            open_regular(root / "zsub" / "inner.csv", "zsub/inner.csv")
    assert REACHED_THROUGH_LINK.startswith("reached through a folder")


@pytest.mark.parametrize("swap", ["link", "fifo"])
def test_a_checkpoint_swapped_after_the_checks_is_still_the_file_checked(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, swap: str
) -> None:
    """The swap is made right after the last check, before torch.load: torch.load reads the
    descriptor the checks read, not whatever the name leads to by then."""
    checkpoint, outside = tmp_path / "ckpt.pt", tmp_path / "outside.pt"
    torch.save({"inside": torch.zeros(2)}, checkpoint)
    torch.save({"OUTSIDE_SECRET": torch.ones(2)}, outside)
    checked = safe_load._refuse_deep_nesting

    def check_then_swap(handle, size, display_path):  # type: ignore[no-untyped-def]
        checked(handle, size, display_path)
        checkpoint.rename(tmp_path / "ckpt.pt.real")
        if swap == "fifo":
            os.mkfifo(checkpoint)
        else:
            checkpoint.symlink_to(outside)

    monkeypatch.setattr(safe_load, "_refuse_deep_nesting", check_then_swap)
    loaded = safe_load.safe_torch_load(checkpoint, "ckpt.pt", LoadOptions())
    assert list(loaded) == ["inside"]


def _csv_run(folder: Path, secret: bool = False) -> None:
    folder.mkdir(parents=True)
    column = "SECRET" if secret else "loss"
    rows = "".join(f"{step},{3 - step / 100:.3f}\n" for step in range(1, 60))
    (folder / "metrics.csv").write_text(f"step,{column}\n" + rows)


def test_a_sweep_run_swapped_for_a_link_after_the_listing_is_refused(tmp_path: Path) -> None:
    """`tscope cluster` lists its runs, then a worker reads each one: a run folder swapped for a
    link to outside in between was read where the link led (the listing's link check had run)."""
    from tscope.cluster_pipeline import RUN_LINK_OUTSIDE, RunTask, profile_task

    runs, outside = tmp_path / "runs", tmp_path / "outside"
    _csv_run(runs / "run1")
    _csv_run(runs / "run7")
    _csv_run(outside, secret=True)
    (runs / "latest").symlink_to(runs / "run7")  # a link inside the runs folder: still a run
    within = os.path.realpath(runs)
    (tmp_path / "out").mkdir()

    def task(name: str) -> RunTask:
        case_dir = str(tmp_path / "out" / name)
        return RunTask(name, str(runs / name), case_dir, False, False, None, within)

    _swap_for_link(runs / "run1", outside)
    swapped = profile_task(task("run1"))
    assert swapped.profile is None and swapped.problem == RUN_LINK_OUTSIDE
    assert profile_task(task("latest")).profile is not None


def test_a_resolved_path_that_became_a_link_is_not_followed(tmp_path: Path) -> None:
    from tscope.errors import UsageError
    from tscope.ingest.inputs import ReadOptions, read_inputs

    run, outside = tmp_path / "run", tmp_path / "outside"
    _csv_run(run)
    _csv_run(outside, secret=True)
    _swap_for_link(run, outside)
    with pytest.raises(UsageError, match="became a symbolic link"):
        read_inputs([run], ReadOptions(read_weights=False, resolved_paths=True))
    assert read_inputs([run], ReadOptions(read_weights=False)).run.has("train/loss") is False
