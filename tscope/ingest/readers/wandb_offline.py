"""A W&B run directory's binary log `run-<id>.wandb`, with its `files/config.yaml` and summary.

Read without wandb (which has no local reader since 0.31, DOMAIN.md §4):

* File header: `:W&B`, u16 0xBEE1, u8 version 0. Then leveldb-log framing: 32 KiB blocks of
  records with a 7-byte header `<IHB>` (CRC-32 of the data seeded with the CRC-32 of the type
  byte, length, type FULL/FIRST/MIDDLE/LAST); fewer than 7 bytes left in a block are padding.
* Each payload is a protobuf `wandb_internal.Record`, decoded by hand (wandb_records.py).
  `history` rows become the series; `config`, `run` and `summary` records, then the sibling
  `files/config.yaml` (`key: {value: ...}`) and `files/wandb-summary.json`, become the config
  (the summary's scalars under `config["wandb_summary"]`; it holds last values, not series).
* Keys may sit in `nested_key` with an empty `key`; several nested parts are joined with "." as
  the W&B UI shows them. The step is `history.step.num`, unless the row logs an optimizer step
  (`train/global_step`, ...), which then wins as in the history reader.
* A run still in progress (or killed) ends inside a record: what comes before is read and the
  cut is listed in `partial`. A record whose CRC does not match is skipped with the rest of its
  block, as leveldb does.
"""

from __future__ import annotations

import math
from array import array
from pathlib import Path
from typing import Any

import numpy as np

from tscope.errors import UnreadableInput
from tscope.ingest import safe_json
from tscope.ingest.base import inside_input, read_head
from tscope.ingest.logs.series_cap import MAX_TABLE_COLUMNS, columns_to_read
from tscope.ingest.logs.table_columns import canonical_column_names, is_bookkeeping_column
from tscope.ingest.readers import wandb_records
from tscope.ingest.readers.protobuf_wire import WireFormatError
from tscope.ingest.readers.wandb_framing import (
    FILE_HEADER,
    FILE_MAGIC,
    FILE_MAGIC_NUMBER,
    SUPPORTED_VERSION,
    iter_payloads,
)
from tscope.ingest.readers.wandb_history import (
    GLOBAL_STEP_KEYS,
    WANDB_STEP_KEY,
    is_wandb_metric_key,
)
from tscope.ingest.readers.wandb_records import MAX_STEP, RunLog, Updates
from tscope.ingest.safe_fs import is_real_folder, read_bytes_bounded
from tscope.model import Caveat, LogRead, PartialInput, RunEvent
from tscope.model.metric_table import MetricTable, TextColumn

# The sibling files are small; a huge one is not what wandb writes and is not worth the memory.
SIBLING_MAX_BYTES = 16 * 1024 * 1024
# PyYAML parses in pure Python (~1 MB/s): a larger config.yaml would cost more time than it is
# worth, and wandb's own are a few KB (one `key: {value: ...}` per setting).
CONFIG_YAML_MAX_BYTES = 2 * 1024 * 1024
CONFIG_INTERNAL_KEYS = frozenset({"_wandb", "wandb_version"})


class WandbOfflineReader:
    name = "wandb_offline"

    def can_read(self, path: Path) -> bool:
        return path.suffix == ".wandb" and read_head(path, len(FILE_MAGIC)) == FILE_MAGIC

    def read(self, path: Path, display_path: str) -> LogRead:
        try:
            data = read_bytes_bounded(path, display_path)
        except OSError as error:
            raise UnreadableInput(display_path, f"cannot open the file ({error})") from error
        if len(data) < FILE_HEADER.size:
            raise UnreadableInput(display_path, "shorter than the 7-byte W&B file header")
        magic, magic_number, version = FILE_HEADER.unpack_from(data)
        if magic != FILE_MAGIC or magic_number != FILE_MAGIC_NUMBER:
            raise UnreadableInput(display_path, "not a W&B run log (wrong file header)")
        if version != SUPPORTED_VERSION:
            raise UnreadableInput(
                display_path,
                f"W&B log format version {version}; tscope reads version {SUPPORTED_VERSION}",
                "Sync the run and export its history with run.scan_history() instead",
            )
        problems: list[str] = []  # the framing's, once its last payload is out
        log = RunLog()
        undecodable = 0
        first_problem = ""
        for payload in iter_payloads(data, problems):
            try:
                log.add_record(payload)
            except WireFormatError as error:
                undecodable += 1
                first_problem = first_problem or f" (the first: {error})"
        undecodable += log.settle()
        if undecodable:
            problems.append(
                f"{undecodable} record(s) that are not valid protobuf skipped{first_problem}"
            )
        siblings = path.parent / "files"
        if inside_input(siblings):
            problems.extend(_read_siblings(siblings, log))
        else:
            problems.append(
                "the run's files/ folder beside it (config, summary) is not read: it lies outside "
                "the input; point tscope at the run's folder to read it"
            )
        return _log_read(log, WandbOfflineReader.name, display_path, problems)


def _log_read(log: RunLog, kind: str, display_path: str, problems: list[str]) -> LogRead:
    """What the records said as a LogRead: metric rows, resume and exit events, the caveat of a
    missing exit record, and the config with the summary's scalars."""
    metrics, step_problem = _metric_rows(log.rows, display_path)
    if step_problem:
        problems.append(step_problem)
    if log.dropped_items:
        problems.append(
            f"{log.dropped_items} history item(s) under keys beyond the first "
            f"{wandb_records.MAX_HISTORY_KEYS:,} distinct ones not read (no training run logs that many; the "
            "file is crafted or damaged)"
        )
    dropped_settings = _dropped_settings(log)
    if dropped_settings:
        problems.append(dropped_settings)
    if log.reached_point_cap:
        problems.append(
            f"only the first {wandb_records.MAX_HISTORY_POINTS:,} history items were read: "
            "tscope reads at most that many from one log file (no training run logs more); the "
            "rest of the file's history is left out"
        )
    if log.oversized_rows:
        problems.append(
            f"{log.oversized_rows} history record(s) over "
            f"{wandb_records.MAX_HISTORY_RECORD_BYTES:,} bytes skipped (no training run logs "
            "such a row; the file is crafted or damaged)"
        )
    if metrics.empty and not log.history_rows:
        problems.append("the log holds no history rows (wandb.log was never called)")
    events: list[RunEvent] = []
    caveats: list[Caveat] = []
    last_step = int(metrics.step.max()) if not metrics.empty else 0
    if log.resumed_at is not None:
        events.append(
            RunEvent(
                "resume",
                log.resumed_at,
                f"W&B resumed this run at step {log.resumed_at}",
                display_path,
            )
        )
    if log.exit_code is None:
        caveats.append(
            Caveat(
                "no_exit_record",
                f"{display_path} has no exit record: the run was still running, or its process "
                "was killed before W&B could finish (crash, out-of-memory kill, preemption).",
                display_path,
            )
        )
    elif log.exit_code != 0:
        events.append(
            RunEvent(
                "exit",
                last_step,
                f"the run exited with code {log.exit_code}",
                display_path,
                {"exit_code": float(log.exit_code)},
            )
        )
    config = {k: v for k, v in log.config.items() if k not in CONFIG_INTERNAL_KEYS}
    summary = _scalar_summary(log.summary)
    if summary:
        config["wandb_summary"] = summary
    return LogRead(
        kind=kind,
        path=display_path,
        metrics=metrics,
        events=events,
        caveats=caveats,
        config=config,
        partial=[PartialInput(display_path, problem) for problem in problems],
        started_at=log.started_at,
    )


def _dropped_settings(log: RunLog) -> str:
    """One line for the config and summary updates under keys past their caps, or ""."""
    counts = [
        (kind, updates.dropped, updates.max_keys)
        for kind, updates in (("config", log.config_updates), ("summary", log.summary_updates))
        if updates.dropped
    ]
    if not counts:
        return ""
    dropped = " and ".join(f"{count:,} {kind} update(s)" for kind, count, _ in counts)
    caps = " and ".join(f"{cap:,} {kind} keys" for kind, _, cap in counts)
    return (
        f"{dropped} under keys beyond the first {caps} not read (real runs hold a few thousand "
        "settings and W&B advises under 10,000 metrics; the file is crafted or damaged); the "
        "history was read"
    )


def _metric_rows(
    history: list[tuple[int | None, list[tuple[str, float]]]], source: str
) -> tuple[MetricTable, str]:
    """The long-form table; the optimizer-step key is the step when any row logs one.

    Built in typed arrays (24 bytes a point), not a tuple a point (~100 bytes): at the
    MAX_HISTORY_POINTS cap the tuples took another 0.5 GB on top of the history read.
    """
    logged_keys = {key.lower() for _, items in history for key, _ in items}
    global_key = next((key for key in GLOBAL_STEP_KEYS if key in logged_keys), None)
    # The series cap, applied before any name is canonicalized: naming costs ~30 us a key, and
    # one history row of 1,000,000 distinct keys (19 MB) took over a minute.
    logged = list(dict.fromkeys(key for _, items in history for key, _ in items))
    read_keys = columns_to_read(logged) if len(logged) > MAX_TABLE_COLUMNS else logged
    metric_keys = [
        key for key in read_keys if is_wandb_metric_key(key) and not is_bookkeeping_column(key)
    ]
    names = dict(canonical_column_names(metric_keys))
    key_codes = {key: code for code, key in enumerate(names)}
    steps, values, codes = array("q"), array("d"), array("i")
    skipped = beyond = 0
    for wandb_step, items in history:
        step = wandb_step
        if global_key is not None or step is None:
            wanted = global_key or WANDB_STEP_KEY
            found = [v for k, v in items if k.lower() == wanted]
            step = _as_step(found[0]) if found else None
        elif abs(step) >= MAX_STEP:
            # history.step.num is an int64: near 2**63 it has no exact float, and a chart over
            # such steps had a width of 0.0 (ZeroDivisionError). Dropped as the tables drop it.
            beyond += any(is_wandb_metric_key(key) for key, _ in items)
            continue
        if step is None:
            skipped += any(is_wandb_metric_key(key) for key, _ in items)
            continue
        for key, value in items:
            code = key_codes.get(key)
            if code is not None:
                steps.append(step)
                values.append(value)
                codes.append(code)
    problems = []
    if len(read_keys) < len(logged):
        problems.append(
            f"{len(logged) - len(read_keys)} of its {len(logged)} history keys not read: tscope "
            f"reads at most {len(read_keys)} keys of a log (the step and loss-like ones first)"
        )
    if skipped:
        problems.append(f"{skipped} history row(s) without {global_key or 'a step'} skipped")
    if beyond:
        problems.append(
            f"{beyond} history row(s) skipped: their step is beyond 2**53, which no training "
            "run reaches"
        )
    return _table(steps, values, codes, names, source), "; ".join(problems)


def _table(
    steps: array[int], values: array[float], codes: array[int], names: dict[str, str], source: str
) -> MetricTable:
    if not steps:
        return MetricTable.no_rows()
    key_codes = np.frombuffer(codes, dtype=np.int32).astype(np.intp)
    return MetricTable(
        np.frombuffer(steps, dtype=np.int64),
        TextColumn(key_codes, tuple(names.values())),
        np.frombuffer(values, dtype=np.float64),
        source,
        TextColumn(key_codes, tuple(names)),
        np.arange(len(steps), dtype=np.int64),
    ).without_unused_labels()


def _as_step(value: float) -> int | None:
    """A logged step counter as an int; None for NaN, fractions and absurd sizes."""
    if not math.isfinite(value) or value != math.floor(value) or abs(value) >= MAX_STEP:
        return None
    return int(value)


def _scalar_summary(summary: dict[str, Any]) -> dict[str, Any]:
    """The summary's last values that are plain finite numbers, text or flags."""
    kept: dict[str, Any] = {}
    for key, value in summary.items():
        if key.startswith("_") or not isinstance(value, (int, float, str, bool)):
            continue
        if isinstance(value, float) and not math.isfinite(value):
            continue
        kept[key] = value
    return kept


def _read_siblings(files_dir: Path, log: RunLog) -> list[str]:
    """Merge `files/config.yaml` and `files/wandb-summary.json` (final values win)."""
    problems: list[str] = []
    if not is_real_folder(files_dir):
        # A linked `files/` is listed by discovery as not followed; reading through it put
        # another folder's config.yaml values into the case.
        return problems
    config_path = files_dir / "config.yaml"
    if config_path.is_file():
        try:
            raw = read_bytes_bounded(config_path, "files/config.yaml", CONFIG_YAML_MAX_BYTES)
            # Aliases budgeted, depth bounded, plain data out (an alias bomb took 13 GB here).
            # PyYAML is imported here, not with the reader registry: a logs-only analyze of a CSV
            # never needs it (bench/bench_startup.py).
            from tscope.ingest import safe_yaml

            document = safe_yaml.load(raw.decode("utf-8-sig"), "files/config.yaml")
            if isinstance(document, dict):
                for key, entry in document.items():
                    internal = str(key) in CONFIG_INTERNAL_KEYS
                    if not internal and isinstance(entry, dict) and "value" in entry:
                        _set_capped(log.config, str(key), entry["value"], log.config_updates)
        except UnreadableInput as error:
            problems.append(f"files/config.yaml not read ({error.problem})")
        except (OSError, ValueError) as error:  # UnicodeDecodeError is a ValueError
            problems.append(f"files/config.yaml not read ({error})")
    summary_path = files_dir / "wandb-summary.json"
    if summary_path.is_file():
        try:
            summary = safe_json.load_file(
                summary_path, "files/wandb-summary.json", SIBLING_MAX_BYTES
            )
            if isinstance(summary, dict):
                for key, value in summary.items():
                    _set_capped(log.summary, str(key), value, log.summary_updates)
        except UnreadableInput as error:
            problems.append(f"files/wandb-summary.json not read ({error.problem})")
    return problems


def _set_capped(state: dict[str, Any], key: str, value: Any, updates: Updates) -> None:
    """Set a sibling file's key over the log's, unless it is a new key past the log's cap
    (counted in the same partial line): a 16 MB wandb-summary.json holds a million tiny keys."""
    if key in state or len(state) < updates.max_keys:
        state[key] = value
    else:
        updates.dropped += 1
