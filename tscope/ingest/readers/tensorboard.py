"""TensorBoard event files (`events.out.tfevents.*`), read without tensorflow or tensorboard.

Every scalar point is kept (TensorBoard's own EventAccumulator keeps a 10,000-point reservoir per
tag by default, DOMAIN.md §3). A file cut off mid-record (a live run) yields everything before the
cut; corrupt framing stops the read at the corruption and keeps what came before.
"""

from __future__ import annotations

from array import array
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from tscope.errors import UnreadableInput
from tscope.ingest.lfs_pointer import refuse_lfs_pointer
from tscope.ingest.logs.series_cap import MAX_TABLE_COLUMNS, columns_to_read
from tscope.ingest.readers.event_proto import ScalarRecords, decode_event
from tscope.ingest.readers.keras_running_mean import batch_values_from_running_means
from tscope.ingest.readers.protobuf_wire import WireFormatError
from tscope.ingest.readers.scalar_runs import decode_scalar_runs
from tscope.ingest.readers.tensorboard_tags import (
    add_hparams_config,
    add_text_config,
    metric_names,
    samples_axis_to_steps,
)
from tscope.ingest.readers.tfrecord import HEADER_BYTES, Records, byte_offset_view, split_records
from tscope.ingest.safe_fs import read_bytes_bounded
from tscope.ingest.settings_bound import BoundedSettings
from tscope.model import Caveat, LogRead, MetricTable, PartialInput, TextColumn
from tscope.model.metric_table import first_seen_codes

# The file name TensorBoard writers use: events.out.tfevents.<time>.<host>.<pid>.<uid>.
_FILE_NAME_MARKER = "tfevents"
# How many leading records to try for the wall time that orders resumed runs' files.
_STARTED_AT_PROBE_RECORDS = 16
# The largest |step| kept, as the CSV, JSON and trainer_state readers keep: 2**53, past which
# integers have no exact float (table_columns.usable_steps).
MAX_STEP = 2**53


class TensorBoardReader:
    name = "tensorboard"

    def __init__(self, verify_checksums: bool = False) -> None:
        # Off by default: checking every record's CRC-32C costs a pass over all bytes.
        self.verify_checksums = verify_checksums

    def can_read(self, path: Path) -> bool:
        return _FILE_NAME_MARKER in path.name

    def read(self, path: Path, display_path: str) -> LogRead:
        refuse_lfs_pointer(path, display_path)  # a clone without `git lfs pull`
        try:
            buffer = read_bytes_bounded(path, display_path)  # regular files only, st_size bytes
        except OSError as error:
            raise UnreadableInput(
                display_path, f"cannot open the file ({error.strerror})"
            ) from error
        if not buffer:
            raise UnreadableInput(
                display_path,
                "the event file is empty",
                "A writer that never flushed leaves an empty file; the run's other event files "
                "may hold its data",
            )
        records = split_records(buffer, verify_data_checksums=self.verify_checksums)
        if records.starts.size == 0:
            raise UnreadableInput(display_path, _no_records_problem(records))

        decoded = _decode_records(buffer, records)
        if decoded.decoded_records == 0:
            raise UnreadableInput(
                display_path,
                "not a TensorBoard event file: no record decodes as an Event",
            )
        metrics, caveats, step_problems = _metric_table(decoded, path, display_path)
        return LogRead(
            kind=self.name,
            path=display_path,
            metrics=metrics,
            caveats=caveats,
            config=decoded.config,
            partial=[
                PartialInput(display_path, problem)
                for problem in [*_problems(records, decoded), *step_problems]
            ],
            started_at=decoded.started_at,
        )


def _no_records_problem(records: Records) -> str:
    if records.truncated_tail:
        return f"cut off before the end of its first record ({records.stop_problem})"
    return "not a TensorBoard event file: the first record's length checksum does not match"


@dataclass
class _Decoded:
    """Scalar points in file order, plus what else the records said."""

    step: np.ndarray  # (n,) int64
    value: np.ndarray  # (n,) float64
    tag_id: np.ndarray  # (n,) int64, index into tags
    tags: list[str]
    config: dict[str, Any] = field(default_factory=dict)
    unread_settings: str | None = None  # the `partial` line for settings past the bound
    started_at: float | None = None
    decoded_records: int = 0
    undecodable_records: int = 0
    first_undecodable_offset: int | None = None
    first_undecodable_reason: str = ""


def _decode_records(buffer: bytes, records: Records) -> _Decoded:
    usable = np.ones(records.starts.size, dtype=bool)
    usable[records.bad_checksums] = False

    fast = decode_scalar_runs(buffer, records.starts, records.lengths)
    keep_fast = usable[fast.record_index]
    tags: list[str] = []
    tag_ids: dict[str, int] = {}
    fast_tag_ids = _fast_tag_ids(buffer, fast, keep_fast, tags, tag_ids)
    # The fast path only takes scalars, so its tags are known scalar series; TF2 writers attach
    # plugin metadata to a tag's first value only, so later values are matched by tag.
    plugin_by_tag = {tag: "scalars" for tag in tags}

    # Typed arrays, not lists: 8 bytes a number instead of a ~32-byte object and its pointer, as
    # an event of many small values gives a point for each ~10 bytes of file.
    slow_record = array("q")
    slow_position = array("q")
    slow_step = array("q")
    slow_value = array("d")
    slow_tag_id = array("q")
    config = BoundedSettings()
    undecodable = 0
    first_undecodable: int | None = None
    first_reason = ""
    is_fast = np.zeros(records.starts.size, dtype=bool)
    is_fast[fast.record_index] = True
    for index in np.flatnonzero(~is_fast & usable).tolist():
        start = int(records.starts[index])
        try:
            event = decode_event(buffer, start, start + int(records.lengths[index]))
        except WireFormatError as error:
            undecodable += 1
            if first_undecodable is None:
                first_undecodable, first_reason = start - HEADER_BYTES, str(error)
            continue
        for position, summary_value in enumerate(event.values):
            tag = summary_value.tag
            if summary_value.plugin_name is not None:
                plugin_by_tag.setdefault(tag, summary_value.plugin_name)
            plugin = plugin_by_tag.get(tag)
            number = summary_value.simple_value
            if number is None and summary_value.tensor is not None and plugin == "scalars":
                number = summary_value.tensor.scalar()
            if number is not None:
                if tag not in tag_ids:
                    tag_ids[tag] = len(tags)
                    tags.append(tag)
                slow_record.append(index)
                slow_position.append(position)
                slow_step.append(event.step)
                slow_value.append(number)
                slow_tag_id.append(tag_ids[tag])
            elif plugin == "text" and summary_value.tensor is not None:
                add_text_config(config, tag, summary_value.tensor.string_val)
            elif plugin == "hparams":
                add_hparams_config(config, summary_value.plugin_content)

    record = np.concatenate([fast.record_index[keep_fast], np.asarray(slow_record, np.int64)])
    within_record = np.concatenate(
        [np.zeros(int(keep_fast.sum()), np.int64), np.asarray(slow_position, np.int64)]
    )
    # Fast-path records come out in file order; only slow-path points need merging in.
    file_order = np.lexsort((within_record, record)) if slow_record else np.arange(record.size)
    return _Decoded(
        step=np.concatenate([fast.step[keep_fast], np.asarray(slow_step, np.int64)])[file_order],
        value=np.concatenate([fast.value[keep_fast], np.asarray(slow_value, np.float64)])[
            file_order
        ],
        tag_id=np.concatenate([fast_tag_ids, np.asarray(slow_tag_id, np.int64)])[file_order],
        tags=tags,
        config=config.kept,
        unread_settings=config.partial_note(),
        started_at=_first_wall_time(buffer, records, usable),
        decoded_records=int(usable.sum()) - undecodable,
        undecodable_records=undecodable,
        first_undecodable_offset=first_undecodable,
        first_undecodable_reason=first_reason,
    )


def _fast_tag_ids(
    buffer: bytes,
    fast: ScalarRecords,
    keep: np.ndarray,
    tags: list[str],
    tag_ids: dict[str, int],
) -> np.ndarray:
    """The tag index of each kept fast-path record, adding new tags to `tags`/`tag_ids`."""
    codes: np.ndarray
    if keep.all():
        # Only the records that lead a group of known-equal tags are compared. The first record
        # holding a tag leads its group (a group's leader comes first), so the tags are found in
        # the same order as when comparing every record.
        leads = fast.tag_like == np.arange(fast.tag_like.size)
        leader_codes, distinct = _group_byte_strings(
            buffer, fast.tag_start[leads], fast.tag_end[leads]
        )
        codes = leader_codes[(np.cumsum(leads) - 1)[fast.tag_like]]
    else:  # a group's leader may have failed its checksum: compare every kept record
        codes, distinct = _group_byte_strings(buffer, fast.tag_start[keep], fast.tag_end[keep])
    id_of_code = []
    for raw in distinct:
        tag = raw.decode("utf-8", errors="replace")
        if tag not in tag_ids:
            tag_ids[tag] = len(tags)
            tags.append(tag)
        id_of_code.append(tag_ids[tag])
    return np.take(np.asarray(id_of_code, dtype=np.int64), codes)


# Multiplier of the word hash that groups tags (FNV-1a's 64-bit prime); collisions are resolved
# exactly afterwards, so the hash only needs to be fast.
_TAG_HASH_PRIME = np.uint64(0x100000001B3)


def _group_byte_strings(
    buffer: bytes, starts: np.ndarray, ends: np.ndarray
) -> tuple[np.ndarray, list[bytes]]:
    """Group the byte strings buffer[start:end]: (group of each, the distinct strings).

    A log repeats a handful of tags a million times, so strings are compared as 8-byte words with
    numpy instead of sliced one by one; each member is then checked word by word against its
    group's first member, and any hash collision is settled by exact comparison.
    """
    if starts.size == 0:
        return np.empty(0, dtype=np.int64), []
    words_at = byte_offset_view(buffer, "<u8")
    last_word = len(buffer) - 8
    lengths = ends - starts
    key = lengths.astype(np.uint64)
    words = []
    for word_start in range(0, int(lengths.max()), 8):
        byte_count = np.clip(lengths - word_start, 0, 8).astype(np.uint64)
        # A 64-bit shift is undefined, so full words take the all-ones mask directly.
        mask = np.where(
            byte_count == 8,
            np.uint64(0xFFFFFFFFFFFFFFFF),
            (np.uint64(1) << (np.uint64(8) * byte_count)) - np.uint64(1),
        )
        word = words_at[np.minimum(starts + word_start, last_word)] & mask
        words.append(word)
        key = (key ^ word) * _TAG_HASH_PRIME
    codes, _ = first_seen_codes(key)
    # first_seen_codes numbers groups in order of first appearance, so a group's first member is where
    # the running maximum of the codes steps up.
    seen_before = np.concatenate(([-1], np.maximum.accumulate(codes)[:-1]))
    first_member = np.flatnonzero(codes > seen_before)
    representative = first_member[codes]
    same = lengths == lengths[representative]
    for word in words:
        same &= word == word[representative]
    distinct = [buffer[int(starts[i]) : int(ends[i])] for i in first_member.tolist()]
    # Exact fallback for the members that only shared a hash with their group.
    by_bytes = {raw: code for code, raw in enumerate(distinct)}
    for index in np.flatnonzero(~same).tolist():
        raw = buffer[int(starts[index]) : int(ends[index])]
        code = by_bytes.get(raw)
        if code is None:
            code = by_bytes[raw] = len(distinct)
            distinct.append(raw)
        codes[index] = code
    return codes, distinct


def _first_wall_time(buffer: bytes, records: Records, usable: np.ndarray) -> float | None:
    """The first event's wall time: it orders the files of a resumed run."""
    for index in np.flatnonzero(usable)[:_STARTED_AT_PROBE_RECORDS].tolist():
        start = int(records.starts[index])
        try:
            event = decode_event(buffer, start, start + int(records.lengths[index]))
        except WireFormatError:
            continue
        if event.wall_time is not None and np.isfinite(event.wall_time):
            return event.wall_time
    return None


def _metric_table(
    decoded: _Decoded, path: Path, source: str
) -> tuple[MetricTable, list[Caveat], list[str]]:
    """The metric table, its caveats, and the problems with its points (for `partial`)."""
    names, cap_problems = _capped_metric_names(decoded.tags, path, source)
    kept_tag = np.asarray([name is not None for name in names], dtype=bool)
    keep = kept_tag[decoded.tag_id] if decoded.tag_id.size else np.zeros(0, dtype=bool)
    # Steps as the table readers take them (|step| < 2**53): an Event's int64 step near 2**63
    # has no exact float, and a chart spanning it had a width of 0.0 (ZeroDivisionError).
    absurd = keep & ((decoded.step >= MAX_STEP) | (decoded.step <= -MAX_STEP))
    problems = cap_problems
    if absurd.any():
        keep &= ~absurd
        problems.append(
            f"{int(absurd.sum())} scalar points skipped: their step is beyond 2**53 "
            f"(the first: {int(decoded.step[np.argmax(absurd)])}); no training run gets there"
        )
    if not keep.any():
        return MetricTable.no_rows(), [], problems
    tag_id = decoded.tag_id[keep]
    steps, caveats = samples_axis_to_steps(decoded.step[keep], tag_id, decoded.tags, source)
    table = MetricTable(
        steps,
        TextColumn(tag_id, [name or "" for name in names]),
        decoded.value[keep],
        source,
        TextColumn(tag_id, decoded.tags),
        np.arange(tag_id.size, dtype=np.int64),
    )
    table, keras_caveats = batch_values_from_running_means(table, source)
    return table, [*caveats, *keras_caveats], problems


def _capped_metric_names(
    tags: list[str], path: Path, source: str
) -> tuple[list[str | None], list[str]]:
    """metric_names for at most MAX_TABLE_COLUMNS tags (the step and loss-like ones first), None
    for the others, and a problem saying how many were not read. The series cap applied before
    naming: naming costs ~30 us a tag, and 300,000 tags took 35 s (the decoding ~2 s)."""
    if len(tags) <= MAX_TABLE_COLUMNS:
        return metric_names(tags, path, source), []
    read_tags = columns_to_read(tags)
    by_tag = dict(zip(read_tags, metric_names(read_tags, path, source), strict=True))
    problem = (
        f"{len(tags) - len(read_tags)} of its {len(tags)} tags not read: tscope reads at most "
        f"{len(read_tags)} tags of a log (the step and loss-like ones first)"
    )
    return [by_tag.get(tag) for tag in tags], [problem]


def _problems(records: Records, decoded: _Decoded) -> list[str]:
    problems = []
    if records.stop_problem is not None:
        problems.append(records.stop_problem)
    if records.bad_checksums.size:
        first = int(records.starts[int(records.bad_checksums[0])]) - HEADER_BYTES
        problems.append(
            f"{records.bad_checksums.size} records failed their data checksum and were skipped "
            f"(the first at byte {first})"
        )
    if decoded.undecodable_records:
        problems.append(
            f"{decoded.undecodable_records} records are not valid Event protos and were skipped "
            f"(the first at byte {decoded.first_undecodable_offset}: "
            f"{decoded.first_undecodable_reason})"
        )
    if decoded.unread_settings is not None:
        problems.append(decoded.unread_settings)
    return problems
