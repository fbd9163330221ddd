"""The bound on the settings (the config) a run's logs record: how many, how long a name, how deep.

Settings end up in case.json, in the report's configuration table and in `tscope cluster`'s
comparison of runs, and every log format can carry any number of them: a crafted TensorBoard
file of 2,475,000 hparams keys (51 MB) took 1.36 GB and a 51 MB case.json, and `tscope cluster`
over 30 such runs 89 s and 1.8 GB (red team, session 31). Real configs hold hundreds to a few
thousand flattened settings, with names of tens of characters, nested two or three levels.
"""

from __future__ import annotations

import json
from typing import Any

# Distinct settings kept from one log; a further one is counted, not kept (W&B's config records
# and TensorBoard's hparams and `args` text share the bound).
MAX_CONFIG_KEYS = 10_000
# A setting's name keeps at most this many characters; a name is a stranger's text like a value.
MAX_SETTING_NAME_CHARS = 1_000
# Nested settings keep this many levels; a deeper value is kept as its JSON text, cut at
# MAX_NESTED_TEXT_CHARS. A 90-deep config of 100 kB keys (9 MB) once held 882 MB in the report's
# table (every level's dotted name alive at once).
MAX_SETTING_DEPTH = 8
MAX_NESTED_TEXT_CHARS = 10_000


class BoundedSettings:
    """Settings as a log states them, first writer of a name wins, at most MAX_CONFIG_KEYS."""

    def __init__(self) -> None:
        self.values: dict[str, Any] = {}
        self.unread = 0

    def add(self, name: str, value: Any) -> None:
        name = cut_name(name)
        if name in self.values:
            return
        if len(self.values) >= MAX_CONFIG_KEYS:
            self.unread += 1
            return
        self.values[name] = bounded_value(value)

    def problem(self) -> str | None:
        """The `partial` line for the settings not kept, or None."""
        if not self.unread:
            return None
        return (
            f"{self.unread:,} more settings not read: tscope keeps at most {MAX_CONFIG_KEYS:,} "
            "settings of one log"
        )


def cut_name(name: str) -> str:
    if len(name) <= MAX_SETTING_NAME_CHARS:
        return name
    return name[: MAX_SETTING_NAME_CHARS - 1] + "…"


def bounded_value(value: Any, depth: int = 0) -> Any:
    """`value` with names cut and nesting below MAX_SETTING_DEPTH kept as (cut) JSON text."""
    if not isinstance(value, dict):
        return value
    if depth >= MAX_SETTING_DEPTH:
        text = json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
        if len(text) > MAX_NESTED_TEXT_CHARS:
            text = text[: MAX_NESTED_TEXT_CHARS - 1] + "…"
        return text
    return {cut_name(str(key)): bounded_value(item, depth + 1) for key, item in value.items()}
