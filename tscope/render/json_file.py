"""case.json: the source of truth, written from the payload (never from a template).

The one encoding of tscope.output_writer.json_text: sorted keys, fixed indentation, no NaN
literals (json_safe turned them into "nan"/"inf" strings), a trailing newline: the same case
always gives the same bytes.
"""

from __future__ import annotations

import json
from typing import Any

from tscope.output_writer import json_text


def case_json_text(payload: dict[str, Any]) -> str:
    return json_text(payload)


def normalized_payload(payload: dict[str, Any]) -> dict[str, Any]:
    """The payload exactly as it reads back from case.json (sorted keys, rounded floats), so a
    rendering from a fresh Case and a re-rendering by `tscope report` cannot differ."""
    return normalized_payload_and_text(payload)[0]


def normalized_payload_and_text(payload: dict[str, Any]) -> tuple[dict[str, Any], str]:
    """normalized_payload and the case.json text it was read back from. The text is also
    case_json_text of the normalized payload (its floats are already rounded, its keys strings
    and sorted), so the file is written from it instead of encoding the payload twice."""
    text = case_json_text(payload)
    loaded: dict[str, Any] = json.loads(text)
    return loaded, text
