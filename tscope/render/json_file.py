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
    loaded: dict[str, Any] = json.loads(case_json_text(payload))
    return loaded
