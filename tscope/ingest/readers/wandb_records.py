"""The protobuf records of a W&B binary log, decoded by hand into what the run logged.

Each payload of `run-<id>.wandb` (split out of its leveldb-log framing by wandb_framing) is a
`wandb_internal.Record` (wandb/proto/wandb_internal.proto); the field numbers below are that
file's. `RunLog` accumulates, in file order, the history rows (step and numeric items), the
config and summary updates (each key's last raw value, for a bounded number of keys; decoded at
the end), the run's start time and resume step, and the exit code. Kept apart from wandb_offline.py, which reads the file
and its sibling files and maps what was logged to the model (metric rows, events, caveats): this
module knows only the protobuf messages.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from typing import Any

from tscope.errors import UnreadableInput
from tscope.ingest import safe_json
from tscope.ingest.readers.protobuf_wire import (
    FIXED64,
    LENGTH_DELIMITED,
    TooManyFields,
    WireFormatError,
    field_values,
    signed64,
    text,
)
from tscope.ingest.settings_bound import MAX_CONFIG_KEYS
from tscope.model.metric_rows import MAX_POINTS_PER_FILE

# wandb_internal.Record and the messages it holds (wandb/proto/wandb_internal.proto).
RECORD_HISTORY, RECORD_SUMMARY, RECORD_CONFIG, RECORD_RUN, RECORD_EXIT = 2, 3, 5, 17, 18
HISTORY_ITEM, HISTORY_STEP, STEP_NUM = 1, 2, 1
ITEM_KEY, ITEM_NESTED_KEY, ITEM_INTEGER, ITEM_NUMBER, ITEM_VALUE_JSON = 1, 2, 5, 6, 16
UPDATE, REMOVE = 1, 2  # ConfigRecord / SummaryRecord: repeated items with the same key fields
RUN_CONFIG, RUN_STARTING_STEP, RUN_START_TIME, RUN_RESUMED = 4, 14, 17, 18
TIMESTAMP_SECONDS, TIMESTAMP_NANOS = 1, 2
EXIT_CODE = 1
# Integral floats above 2**53 lose precision; a step counter never gets there.
MAX_STEP = 2.0**53


_KeyPath = tuple[str, ...]
# Raw key fields -> (key path, name as the W&B UI shows it). Keys repeat on every row.
_KeyNames = dict[tuple[bytes, ...], tuple[_KeyPath, str]]
# Distinct history keys kept, in the order the log first uses them; an item under a further key
# is dropped and counted (and its name is not cached). The reader reads at most
# series_cap.MAX_TABLE_COLUMNS series anyway; a real run logs thousands of keys at most. Without
# the bound a crafted 17 MB log of 1,000,000 distinct keys held ~500 MB (30× the file: a cached
# name per key, a tuple per item), now ~MAX_HISTORY_KEYS names and their items.
MAX_HISTORY_KEYS = 100_000
# Distinct config keys kept (settings_bound.MAX_CONFIG_KEYS), in the order of their last update;
# an update under a further key is dropped and counted. Without the bound a crafted 61 MB log of
# 2,500,000 one-key config records, each a new key, was kept record by record and merged into a
# 2.5-million-key config: 0.9 GB and 29 s to read, 1.3 GB to analyze; now the updates past the
# bound cost no memory.
# Distinct summary keys kept, likewise: the summary holds a key per logged metric (its last
# value), and W&B's docs advise under 10,000 distinct metrics a project; tscope reads at most
# series_cap.MAX_TABLE_COLUMNS series of a log anyway. The same crafted log of summary records
# cost what the config one did.
MAX_SUMMARY_KEYS = 10_000
# A config or summary key path (nested_key) longer than this is not read: real configs nest 2-3
# levels (run_config.MAX_CONFIG_DEPTH reads 16); one of 1,000 parts built a dict 1,000 deep
# that writing case.json recursed through (RecursionError, found by fuzzing).
MAX_KEY_PATH_PARTS = 16
# A history item (a key and its value) larger than this is not read: a number's item is tens of
# bytes, a media or table item's JSON (never a number) can be larger.
MAX_HISTORY_ITEM_BYTES = 64 * 1024
# History items kept from one log: the points cap every reader applies (metric_rows), counted
# while reading. A kept item costs ~90 bytes here and as much again as a table row, for ~7 bytes
# of file: a 100 MB log of small integer items took over 3 GB; at the cap it stops near 1 GB.
MAX_HISTORY_POINTS = MAX_POINTS_PER_FILE
# Largest history record decoded. Its fields are listed before its items are kept (~100 bytes a
# 7-byte item), so one 100 MB record would cost 1.5 GB on its own. A row of MAX_HISTORY_KEYS keys
# of 30-character names is ~5 MB; a larger record is skipped and counted.
MAX_HISTORY_RECORD_BYTES = 16 * 1024 * 1024
# Largest summary, config, run or exit record decoded; a larger one is refused as crafted. The
# wandb client's file stream drops a history or summary line over 10 MiB - 100 KiB (util.py
# MAX_LINE_BYTES, "imposed by back end") and its docs ask for under 1 MB a value.
MAX_RECORD_BYTES = MAX_HISTORY_RECORD_BYTES
# Fields counted in each message while it is listed, past which the record is refused: a field
# can be 2 bytes of file and ~70 bytes as a listed tuple, and a crafted 60 MB record of them took
# 2.4 GB (red team, session 29). A Record holds num, one record (a oneof), control, uuid and _info;
# step, timestamp and exit messages two or three fields; an item its key, value and _info, with
# at most MAX_KEY_PATH_PARTS nested key parts read (W&B itself nests config keys 4 deep).
MAX_MESSAGE_FIELDS = 64
# Items of one history row, or updates and removals of one config or summary record: a row holds
# one item a key (W&B's docs advise under 10,000 distinct metrics a project; tscope reads
# MAX_HISTORY_KEYS), a summary one a history key, a config one a setting.
MAX_ITEMS_PER_RECORD = MAX_HISTORY_KEYS
# A RunRecord declares ~30 fields; only `tags` repeats (a few tags a run).
MAX_RUN_FIELDS = 10_000
# The Record fields read; the others (console output, stats, files, artifacts...) are stepped
# over without being copied.
_READ_RECORDS = frozenset({RECORD_HISTORY, RECORD_SUMMARY, RECORD_CONFIG, RECORD_RUN, RECORD_EXIT})
_ROW_FIELDS = frozenset({HISTORY_ITEM, HISTORY_STEP})  # a row's _info is stepped over
_UPDATE_FIELDS = frozenset({UPDATE, REMOVE})
_RECORD_NAMES = {
    RECORD_SUMMARY: "summary",
    RECORD_CONFIG: "config",
    RECORD_RUN: "run",
    RECORD_EXIT: "exit",
}


def _key_names(raw_key: tuple[bytes, ...], key_names: _KeyNames) -> tuple[_KeyPath, str]:
    """(key path, name as the W&B UI shows it) of a history key not yet cached."""
    path = tuple(text(raw) for raw in raw_key)
    names = (path, ".".join(path))
    if len(key_names) < MAX_HISTORY_KEYS:
        key_names[raw_key] = names
    return names


def _item_fields(buffer: bytes) -> tuple[tuple[bytes, ...], float | None, bytes]:
    """(raw key parts, number field or None, raw JSON) of a History/Config/SummaryItem."""
    raw_keys: list[bytes] = []
    number: float | None = None
    raw_json = b""
    for number_field, wire, value in field_values(buffer, MAX_MESSAGE_FIELDS, "an item"):
        if number_field in (ITEM_KEY, ITEM_NESTED_KEY) and isinstance(value, bytes):
            # Parts past the bound are not kept: the path is too deep to be read either way,
            # and a history key of millions of parts cost ~40 bytes of memory per file byte
            # (red team, session 27).
            if value and len(raw_keys) <= MAX_KEY_PATH_PARTS:
                raw_keys.append(value)
        elif number_field == ITEM_VALUE_JSON and isinstance(value, bytes):
            raw_json = value
        elif number_field == ITEM_NUMBER and wire == FIXED64 and isinstance(value, bytes):
            number = struct.unpack("<d", value)[0]
        elif number_field == ITEM_INTEGER and isinstance(value, int):
            number = float((value >> 1) ^ -(value & 1))  # zigzag sint64
    return tuple(raw_keys), number, raw_json


@dataclass
class Updates:
    """A config's or summary's state as its records update it: each kept key's last raw JSON.

    Merged as the records come, not kept record by record: a crafted log of millions of tiny
    records each under a new key held every record, then every key. Keys are the raw key parts,
    decoded to text only for the kept ones at the end (`settled`).
    """

    max_keys: int
    # In the order of each key's last update, so that a nested key updated after its parent
    # lands inside it (and a parent updated after lands over it), as W&B applies them.
    latest: dict[tuple[bytes, ...], bytes] = field(default_factory=dict)
    dropped: int = 0  # updates under keys beyond max_keys, not read
    malformed: int = 0  # records or items that are not a setting

    def add(self, record: bytes) -> None:
        """Apply one Config/SummaryRecord; raises WireFormatError on a malformed or over-long one
        (before any of its updates is applied)."""
        limit = MAX_ITEMS_PER_RECORD + MAX_MESSAGE_FIELDS
        fields = field_values(record, limit, "a config or summary record", _UPDATE_FIELDS)
        latest = self.latest
        for number, _, value in fields:
            # An empty item has no key: skipped before it is decoded.
            if not isinstance(value, bytes) or not value:
                continue
            try:
                key, _, raw_json = _item_fields(value)
            except TooManyFields:
                self.malformed += 1  # not a setting: a key of more parts than any config
                continue
            if len(key) > MAX_KEY_PATH_PARTS:
                self.malformed += 1  # not a setting: a crafted path nests past any config
            elif not key:
                continue
            elif number == REMOVE:
                latest.pop(key, None)
            elif key in latest:
                del latest[key]  # moved to the end: the order of last updates
                latest[key] = raw_json
            elif len(latest) < self.max_keys:
                latest[key] = raw_json
            else:
                self.dropped += 1  # a counter, no object: the point of the bound

    def settled(self) -> dict[str, Any]:
        """The kept keys as nested settings, their values JSON-decoded."""
        state: dict[str, Any] = {}
        for key, stored in self.latest.items():  # oldest first, so nested keys land last
            path = [text(part) for part in key]
            parent = state
            for part in path[:-1]:
                child = parent.get(part)
                if not isinstance(child, dict):
                    child = parent[part] = {}
                parent = child
            try:
                parent[path[-1]] = safe_json.loads(stored, "config value")
            except UnreadableInput:  # text, or JSON nested too deep to be a setting
                parent[path[-1]] = text(stored)
        return state


@dataclass
class RunLog:
    """What the records say, accumulated in file order."""

    rows: list[tuple[int | None, list[tuple[str, float]]]] = field(default_factory=list)
    # Config and summary updates are merged as they come, their values decoded once at the end
    # (`settle`): a long run writes a summary record per step, and only each key's last update
    # matters. The caps are read when the log is made (tests lower them).
    config_updates: Updates = field(default_factory=lambda: Updates(MAX_CONFIG_KEYS))
    summary_updates: Updates = field(default_factory=lambda: Updates(MAX_SUMMARY_KEYS))
    config: dict[str, Any] = field(default_factory=dict)
    summary: dict[str, Any] = field(default_factory=dict)
    key_names: _KeyNames = field(default_factory=dict)
    history_keys: set[str] = field(default_factory=set)  # at most MAX_HISTORY_KEYS
    dropped_items: int = 0  # history items under keys beyond MAX_HISTORY_KEYS
    history_rows: int = 0  # history records read; `rows` keeps only those with items
    kept_points: int = 0  # items in `rows`, at most MAX_HISTORY_POINTS
    reached_point_cap: bool = False  # set when the cap is hit: later history is not read
    oversized_rows: int = 0  # history records over MAX_HISTORY_RECORD_BYTES, skipped
    started_at: float | None = None
    resumed_at: int | None = None
    exit_code: int | None = None

    def add_record(self, payload: bytes) -> None:
        """Add one Record; raises WireFormatError on malformed, over-long or oversized ones."""
        records = field_values(payload, MAX_MESSAGE_FIELDS, "a Record", _READ_RECORDS)
        for number, wire, value in records:
            if wire != LENGTH_DELIMITED or not isinstance(value, bytes):
                continue
            if number != RECORD_HISTORY and len(value) > MAX_RECORD_BYTES:
                raise WireFormatError(
                    f"a {_RECORD_NAMES[number]} record of {len(value):,} bytes, "
                    f"over the {MAX_RECORD_BYTES:,} bytes tscope reads (wandb sends no line "
                    "over 10 MB): crafted or damaged"
                )
            if number == RECORD_HISTORY:
                self._add_history(value)
            elif number == RECORD_SUMMARY:
                self.summary_updates.add(value)
            elif number == RECORD_CONFIG:
                self.config_updates.add(value)
            elif number == RECORD_RUN:
                self._add_run(value)
            elif number == RECORD_EXIT:
                self.exit_code = 0
                for exit_field, _, exit_value in field_values(
                    value, MAX_MESSAGE_FIELDS, "an exit record"
                ):
                    if exit_field == EXIT_CODE and isinstance(exit_value, int):
                        self.exit_code = signed64(exit_value)

    def _add_history(self, buffer: bytes) -> None:
        if self.reached_point_cap:
            return
        self.history_rows += 1
        if len(buffer) > MAX_HISTORY_RECORD_BYTES:
            self.oversized_rows += 1
            return
        step, items = self._history_row(buffer)
        if items:  # a row without items adds no point (and cost ~120 bytes for ~9 in the file)
            self.rows.append((step, items))
            self.kept_points += len(items)

    def _history_row(self, buffer: bytes) -> tuple[int | None, list[tuple[str, float]]]:
        step: int | None = None
        items: list[tuple[str, float]] = []
        room = MAX_HISTORY_POINTS - self.kept_points
        limit = MAX_ITEMS_PER_RECORD + MAX_MESSAGE_FIELDS
        for number, _, value in field_values(buffer, limit, "a history row", _ROW_FIELDS):
            if number == HISTORY_ITEM and not value:
                continue  # an empty item (2 bytes of file) has no key: nothing to read
            if number == HISTORY_ITEM and isinstance(value, bytes) and len(items) >= room:
                self.reached_point_cap = True  # this row's step is still read: it comes last
            elif number == HISTORY_ITEM and isinstance(value, bytes):
                if len(value) > MAX_HISTORY_ITEM_BYTES:
                    self.dropped_items += 1  # no number needs this much: a crafted key or value
                    continue
                # One call an item, the name cache looked up here: this loop runs per point.
                raw_key, numeric, raw_json = _item_fields(value)
                path, key = self.key_names.get(raw_key) or _key_names(raw_key, self.key_names)
                if numeric is None and raw_json:
                    try:
                        # JSON numbers and W&B's NaN/Infinity/-Infinity; text, booleans and
                        # media dicts fail.
                        numeric = float(raw_json)
                    except ValueError:
                        continue
                if numeric is None or not key or len(path) > MAX_KEY_PATH_PARTS:
                    continue
                if key not in self.history_keys:
                    if len(self.history_keys) >= MAX_HISTORY_KEYS:
                        self.dropped_items += 1
                        continue
                    self.history_keys.add(key)
                items.append((key, numeric))
            elif number == HISTORY_STEP and isinstance(value, bytes):
                step = 0  # proto3: an empty step message is step 0
                for step_field, _, step_value in field_values(value, MAX_MESSAGE_FIELDS, "a step"):
                    if step_field == STEP_NUM and isinstance(step_value, int):
                        step = signed64(step_value)
        return step, items

    def _add_run(self, buffer: bytes) -> None:
        resumed, starting_step = False, 0
        for number, _, value in field_values(buffer, MAX_RUN_FIELDS, "a run record"):
            if number == RUN_CONFIG and isinstance(value, bytes):
                try:
                    self.config_updates.add(value)
                except WireFormatError:  # the run's other fields are still read
                    self.config_updates.malformed += 1
            elif number == RUN_START_TIME and isinstance(value, bytes):
                fields = field_values(value, MAX_MESSAGE_FIELDS, "a timestamp")
                stamp = {n: v for n, _, v in fields if isinstance(v, int)}
                seconds = stamp.get(TIMESTAMP_SECONDS, 0) + stamp.get(TIMESTAMP_NANOS, 0) / 1e9
                self.started_at = float(seconds)
            elif number == RUN_RESUMED and isinstance(value, int):
                resumed = bool(value)
            elif number == RUN_STARTING_STEP and isinstance(value, int):
                starting_step = signed64(value)
        if resumed and abs(starting_step) < MAX_STEP:  # a step, as history rows' (wandb_offline)
            self.resumed_at = starting_step

    def settle(self) -> int:
        """Decode the kept config and summary values; the count of undecodable updates."""
        self.config = self.config_updates.settled()
        self.summary = self.summary_updates.settled()
        return self.config_updates.malformed + self.summary_updates.malformed
