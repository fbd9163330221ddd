"""The files of a tscope report (case.*, cluster.*): the formats asked for, the output folder, the
text files written, and reading a JSON report back for re-rendering, with one-line errors."""

from __future__ import annotations

import os
import stat
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any, TypeVar

from tscope.errors import UnreadableInput, UsageError
from tscope.model import json_parse
from tscope.model.case import SCHEMA_VERSION
from tscope.model.case_fields import CaseFormatError
from tscope.output_files import prepare_folder

__all__ = [
    "FORMATS",
    "check_formats",
    "output_directory",
    "read_payload",
    "report_texts",
    "typed_payload",
]

Typed = TypeVar("Typed")

FORMATS = ("html", "md", "json")
# A case.json holds bucketed charts (1,200 points per series) and capped lists: a few MB at most.
MAX_REPORT_BYTES = 256 * 1024 * 1024


def check_formats(formats: Sequence[str]) -> None:
    unknown = [name for name in formats if name not in FORMATS]
    if unknown:
        raise UsageError(
            f"Unknown report format {', '.join(map(repr, unknown))}: choose from {', '.join(FORMATS)}."
        )


def typed_payload(
    read: Callable[[dict[str, Any]], Typed], payload: dict[str, Any], where: str, command: str
) -> Typed:
    """The payload read by `read` (Case.from_dict, ClusterFile.from_dict); a field of the wrong
    type ends in one line naming `where` and the `tscope {command}` that writes it again."""
    try:
        return read(payload)
    except CaseFormatError as error:
        raise UnreadableInput(
            where, str(error), f"Re-run `tscope {command}` to write it again"
        ) from error


def report_texts(
    formats: Sequence[str],
    names: tuple[str, str, str],
    json_text: Callable[[], str],
    html: Callable[[], str],
    markdown: Callable[[], str],
    chart_svgs: Iterable[tuple[str, str]],
) -> list[tuple[str, str]]:
    """(file name, text) of each format asked for, each once, in the order asked; `names` are the
    (json, html, md) file names, and the Markdown's SVG charts come just before it. What is not
    asked for is not rendered. tscope.output_writer.write_texts writes them."""
    json_name, html_name, md_name = names
    texts: list[tuple[str, str]] = []
    for name in dict.fromkeys(formats):
        if name == "json":
            texts.append((json_name, json_text()))
        elif name == "html":
            texts.append((html_name, html()))
        else:
            texts.extend((file, svg + "\n") for file, svg in chart_svgs)
            texts.append((md_name, markdown()))
    return texts


def output_directory(out_dir: str | os.PathLike[str], what: str) -> Path:
    """The folder to write `what` ("the case", "the cluster report") into, created if needed;
    refused when it is a symbolic link (tscope never writes through one)."""
    return prepare_folder(Path(out_dir), what)


def read_payload(
    dir_or_file: str | os.PathLike[str], file_name: str, kind: str, command: str, where: str
) -> tuple[Path, dict[str, Any]]:
    """(the file, its JSON object) from a report folder or the file itself, for `kind` ("case",
    "cluster") written by `tscope {command}`; the schema's major version must be ours."""
    path = Path(dir_or_file)
    file = path / file_name if path.is_dir() else path
    rewrite = f"Re-run `tscope {command}` to write it again"
    if not file.exists():
        raise UnreadableInput(str(file), "no such file", where)
    # The file named on the command line may be a link (the user chose it); one found inside the
    # folder may not. Only a regular file is read: a FIFO named case.json would block forever.
    found = os.stat(file) if file == path else os.lstat(file)
    if not stat.S_ISREG(found.st_mode):
        problem = "a symbolic link" if stat.S_ISLNK(found.st_mode) else "not a regular file"
        raise UnreadableInput(str(file), f"{problem}; tscope reads only regular files", where)
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
