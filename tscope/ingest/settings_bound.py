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

from tscope.model.visible_text import cut_text

# Setting values kept from one log file, and from one run in all; a further one is counted, not
# kept (W&B's config records, TensorBoard's hparams and `args` text, every format's config).
MAX_CONFIG_KEYS = 10_000
# A setting's name keeps at most this many characters; a name is a stranger's text like a value.
MAX_SETTING_NAME_CHARS = 1_000
# Nested settings keep this many levels; a deeper value is kept as its JSON text, cut at
# MAX_NESTED_TEXT_CHARS. A 90-deep config of 100 kB keys (9 MB) once held 882 MB in the report's
# table (every level's dotted name alive at once).
MAX_SETTING_DEPTH = 8
MAX_NESTED_TEXT_CHARS = 10_000


class BoundedSettings:
    """Settings as a log or run states them, the first writer of a name winning: at most
    MAX_CONFIG_KEYS leaf values in all (a nested dict's leaves count one by one: a W&B config
    value may hold a million keys), names cut, nesting below MAX_SETTING_DEPTH kept as (cut)
    JSON text."""

    def __init__(self) -> None:
        self.kept: dict[str, Any] = {}
        self.dropped = 0  # values not kept (a setting updated twice past the bound counts twice)
        self._left = MAX_CONFIG_KEYS

    def add(self, name: str, value: Any) -> None:
        name = cut_name(name)
        if name in self.kept:
            return
        if self._left <= 0:
            self.dropped += 1
            return
        self.kept[name] = self._bounded(value, 0)

    def partial_note(self) -> str | None:
        """The `partial` line for the values not kept, or None."""
        if not self.dropped:
            return None
        return (
            f"{self.dropped:,} more settings not read: tscope keeps at most "
            f"{MAX_CONFIG_KEYS:,} setting values (per log file and per run)"
        )

    def _bounded(self, value: Any, depth: int) -> Any:
        if not isinstance(value, dict):
            self._left -= 1
            return value
        if depth >= MAX_SETTING_DEPTH:
            self._left -= 1
            text = json.dumps(value, ensure_ascii=False, default=str, sort_keys=True)
            return cut_text(text, MAX_NESTED_TEXT_CHARS)
        kept: dict[str, Any] = {}
        for key, item in value.items():
            if self._left <= 0:
                self.dropped += 1
                continue
            kept[cut_name(str(key))] = self._bounded(item, depth + 1)
        return kept


def cut_name(name: str) -> str:
    """A setting's name as kept: at most MAX_SETTING_NAME_CHARS characters."""
    return cut_text(name, MAX_SETTING_NAME_CHARS)
