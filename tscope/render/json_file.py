"""case.json: the source of truth, written from the payload (never from a template).

Sorted keys, fixed indentation, no NaN literals (json_safe turned them into "nan"/"inf" strings),
a trailing newline: the same case always gives the same bytes.
"""

from __future__ import annotations

import json
import os
from typing import Any

from tscope.model.case import json_safe


def case_json_text(payload: dict[str, Any]) -> str:
    text = json.dumps(
        json_safe(payload),
        sort_keys=True,
        indent=2,
        ensure_ascii=False,
        allow_nan=False,
        default=_jsonable,
    )
    return text + "\n"


def normalized_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload exactly as it reads back from case.json (sorted keys, rounded floats), so a
    rendering from a fresh Case and a re-rendering by `tscope report` cannot differ."""
    loaded: dict[str, Any] = json.loads(case_json_text(payload))
    return loaded


def _jsonable(value: Any) -> Any:
    """Values json_safe lets through: numpy scalars (bool_, 0-d arrays) and paths."""
    if isinstance(value, os.PathLike):
        return os.fspath(value)
    if hasattr(value, "item"):
        return json_safe(value.item())
    raise TypeError(f"case payload holds a {type(value).__name__}, which JSON cannot represent")
