"""The files of a tscope report (case.*, cluster.*): the formats asked for, the output folder, the
text files written, and reading a JSON report back for re-rendering, with one-line errors."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tscope.errors import UnreadableInput, UsageError
from tscope.model import json_parse
from tscope.model.case import SCHEMA_VERSION

FORMATS = ("html", "md", "json")
# A case.json holds bucketed charts (1,200 points per series) and capped lists: a few MB at most.
MAX_REPORT_BYTES = 256 * 1024 * 1024


def check_formats(formats: Sequence[str]) -> None:
    unknown = [name for name in formats if name not in FORMATS]
    if unknown:
        raise UsageError(
            f"Unknown report format {', '.join(map(repr, unknown))}: choose from {', '.join(FORMATS)}."
        )


def output_directory(out_dir: str | os.PathLike[str], what: str) -> Path:
    """The folder to write `what` ("the case", "the cluster report") into, created if needed."""
    directory = Path(out_dir)
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except OSError as error:
        raise UsageError(
            f"Cannot write {what} into {directory}: {error.strerror or error}. "
            "Pass --out with a folder you can write to."
        ) from error
    return directory


def write_text(path: Path, text: str) -> Path:
    path.write_text(text, encoding="utf-8", newline="\n")
    return path


def read_payload(
    dir_or_file: str | os.PathLike[str], file_name: str, kind: str, command: str, where: str
) -> tuple[Path, dict[str, Any]]:
    """(the file, its JSON object) from a report folder or the file itself, for `kind` ("case",
    "cluster") written by `tscope {command}`; the schema's major version must be ours."""
    path = Path(dir_or_file)
    file = path / file_name if path.is_dir() else path
    rewrite = f"Re-run `tscope {command}` to write it again"
    if not file.is_file():
        raise UnreadableInput(str(file), "no such file", where)
    try:
        with file.open("rb") as handle:
            data = handle.read(MAX_REPORT_BYTES + 1)
    except OSError as error:
        raise UnreadableInput(str(file), str(error.strerror or error), rewrite) from error
    if len(data) > MAX_REPORT_BYTES:
        raise UnreadableInput(str(file), f"larger than the {MAX_REPORT_BYTES} bytes of a case", "")
    try:
        # Bounded nesting, numbers int64-safe: a crafted case.json ends in one line.
        payload = json_parse.parse(data, refuse_huge_ints=True)
    except json_parse.RefusedJson as error:
        raise UnreadableInput(str(file), error.problem, rewrite) from error
    if not isinstance(payload, dict) or "schema_version" not in payload:
        raise UnreadableInput(str(file), f"not a tscope {kind} file (no schema_version)", "")
    major = str(payload["schema_version"]).split(".")[0]
    if major != SCHEMA_VERSION.split(".")[0]:
        raise UnreadableInput(
            str(file),
            f"{kind} schema {payload['schema_version']} is not schema {SCHEMA_VERSION}, "
            "the one this tscope reads",
            f"Re-render it with the tscope that wrote it, or re-run `tscope {command}`",
        )
    return file, payload
