"""JSON files from strangers: read under a size limit, then parsed by tscope.model.json_parse
(nesting limit, int64-safe numbers). Every JSON reader of tscope goes through here."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from tscope.errors import UnreadableInput
from tscope.ingest.safe_fs import read_bytes_bounded
from tscope.model.json_parse import MAX_JSON_DEPTH, RefusedJson, depth_over_limit, parse

__all__ = ["MAX_JSON_DEPTH", "depth_over_limit", "load_file", "loads"]


def loads(
    data: bytes | str,
    display_path: str,
    max_depth: int = MAX_JSON_DEPTH,
    refuse_huge_ints: bool = False,
) -> Any:
    """One JSON document (see tscope.model.json_parse); UnreadableInput when it is refused."""
    try:
        return parse(data, max_depth, refuse_huge_ints)
    except RefusedJson as error:
        raise UnreadableInput(display_path, error.problem, error.hint) from error


def load_file(
    path: Path,
    display_path: str,
    max_bytes: int,
    max_depth: int = MAX_JSON_DEPTH,
    refuse_huge_ints: bool = False,
) -> Any:
    """`loads` of a regular file of at most `max_bytes` bytes."""
    data = read_bytes_bounded(path, display_path, max_bytes)
    return loads(data, display_path, max_depth, refuse_huge_ints)
