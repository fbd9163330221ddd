"""The demo's run folder: the names the demo writes there, and clearing an earlier demo run from
it without ever deleting what the demo did not write (train.py trains into it)."""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from tscope.errors import UsageError
from tscope.model.visible_text import visible
from tscope.output_files import prepare_folder

MARKER_NAME = ".tscope-demo.json"
LOG_NAME = "train.log"
METRICS_NAME = "metrics.jsonl"


def checkpoint_name(iter_num: int) -> str:
    return f"ckpt_{iter_num:06d}.pt"


# Everything the demo writes into its run folder (make_demo_run): the marker, the two logs and
# checkpoint_name's files. prepare_run_dir removes these names and no others.
_DEMO_FILE_NAMES = frozenset({MARKER_NAME, LOG_NAME, METRICS_NAME})
_CHECKPOINT_NAME = re.compile(r"ckpt_[0-9]{6,}\.pt")
_FOLDER_FLAGS = os.O_RDONLY | getattr(os, "O_DIRECTORY", 0) | getattr(os, "O_NOFOLLOW", 0)


def prepare_run_dir(out_dir: Path) -> None:
    """Create out_dir, or clear an earlier demo run from it; refuse anything else.

    Only names the demo itself writes are ever removed (`is_demo_file`), and only when an earlier
    demo's marker is there too: the marker's own list of files is not trusted, since anyone can
    write one (a planted `{"files": ["thesis.tex"]}` once had the demo delete thesis.tex). Every
    entry is judged by lstat relative to the opened folder, so a link is never followed: a link,
    a folder or any other name makes the folder foreign, and it is left untouched.
    """
    if out_dir.exists() and not out_dir.is_dir():
        raise UsageError(f"Cannot write the demo run to {out_dir}: it is a file. Pass a folder.")
    prepare_folder(out_dir, "the demo run")  # created; refused when it is a link
    folder = os.open(out_dir, _FOLDER_FLAGS)  # O_NOFOLLOW: the folder checked above, not a link
    try:
        entries = sorted(os.listdir(folder))
        if not entries:
            return
        foreign = [name for name in entries if not _is_demo_regular_file(name, folder)]
        if foreign or MARKER_NAME not in entries:
            shown = ", ".join(visible(name) for name in (foreign or entries)[:5])
            raise UsageError(
                f"Cannot write the demo run to {visible(out_dir)}: it holds files the demo did "
                f"not write ({shown}). Pass a new or empty folder with --out."
            )
        for name in entries:
            os.unlink(name, dir_fd=folder)  # a regular file (lstat above), never a link's target
    finally:
        os.close(folder)


def is_demo_file(name: str) -> bool:
    """Whether `name` is one the demo writes into its run folder: its fixed set, nothing else."""
    return name in _DEMO_FILE_NAMES or _CHECKPOINT_NAME.fullmatch(name) is not None


def _is_demo_regular_file(name: str, folder: int) -> bool:
    """A demo file name holding a regular file (lstat: a link at the name is not one)."""
    if not is_demo_file(name):
        return False
    try:
        return stat.S_ISREG(os.lstat(name, dir_fd=folder).st_mode)
    except OSError:
        return False
