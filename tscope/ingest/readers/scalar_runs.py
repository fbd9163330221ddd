"""Runs of identically laid out scalar records, decoded as strided columns of the file.

A training log repeats one cycle of records (the same tags in the same order, the same record
lengths) for thousands of steps, so the records at one position of the cycle lie at a constant
byte stride: viewed as rows of a 2-D array they differ only in the wall time, the step varint's
bytes, the number and the data checksum. For each such run the first record is decoded by
event_proto.decode_scalar_records, every other byte of the other rows is compared with its bytes,
and the rows that match are decoded from columns of the view: no per-record gathers, no per-record
tag comparison. Rows that do not match, short runs and everything else take
decode_scalar_records, so the result is exactly what it gives for every record (the bytes a
record's decoding depends on are all compared; tests/test_scalar_runs.py checks the equality).
"""

from __future__ import annotations

import numpy as np

from tscope.ingest.readers.event_proto import ScalarRecords, decode_scalar_records, value_dtype
from tscope.ingest.readers.tfrecord import HEADER_BYTES

# Records per cycle looked for (tags logged per step) and the shortest run worth a strided view:
# each run costs a dozen numpy calls, a gather costs per record.
_LONGEST_CYCLE_RECORDS = 32
_MIN_RUN_RECORDS = 256
# Records sampled (from the middle of the file) to find the cycle length, and the records of one
# chain that must match to confirm it.
_PROBE_RECORDS = 4096
_PROBE_CHAIN_RECORDS = 16
# Event field bytes: wall_time's tag and value, then step's tag (all fixed by the fast layout).
_WALL_TIME_END = 9
_STEP_VARINT_START = 10


def decode_scalar_runs(buffer: bytes, starts: np.ndarray, lengths: np.ndarray) -> ScalarRecords:
    """decode_scalar_records(buffer, starts, lengths), faster on long runs of one layout, with
    `tag_like` naming for each record of a run the run's first record."""
    count = starts.size
    period = _cycle_length(buffer, starts, lengths)
    if period is None:
        return decode_scalar_records(buffer, starts, lengths)
    accepted = np.zeros(count, dtype=bool)
    step = np.zeros(count, dtype=np.int64)
    value = np.zeros(count, dtype=np.float64)
    tag_start = np.zeros(count, dtype=np.int64)
    tag_end = np.zeros(count, dtype=np.int64)
    value_start = np.zeros(count, dtype=np.int64)
    tag_like = np.arange(count, dtype=np.int64)
    covered = np.zeros(count, dtype=bool)

    runs = _runs(starts, period)
    if runs:
        firsts = np.asarray([first for first, _, _ in runs], dtype=np.int64)
        leaders = decode_scalar_records(buffer, starts[firsts], lengths[firsts])
        for which in range(leaders.record_index.size):
            first, rows_count, stride = runs[int(leaders.record_index[which])]
            start = int(starts[first])
            matched = _decode_run(
                buffer,
                start,
                int(lengths[first]),
                rows_count,
                stride,
                int(leaders.value_start[which]) - start,
                int(leaders.tag_end[which]) - start,
            )
            if matched is None:
                continue
            run_step, run_value = matched
            kept = slice(first, first + run_step.size * period, period)
            accepted[kept] = covered[kept] = True
            step[kept] = run_step
            value[kept] = run_value
            tag_start[kept] = starts[kept] + (int(leaders.tag_start[which]) - start)
            tag_end[kept] = starts[kept] + (int(leaders.tag_end[which]) - start)
            value_start[kept] = starts[kept] + (int(leaders.value_start[which]) - start)
            tag_like[kept] = first

    rest = np.flatnonzero(~covered)
    others = decode_scalar_records(buffer, starts[rest], lengths[rest])
    decoded = rest[others.record_index]
    accepted[decoded] = True
    step[decoded] = others.step
    value[decoded] = others.value
    tag_start[decoded] = others.tag_start
    tag_end[decoded] = others.tag_end
    value_start[decoded] = others.value_start

    record_index = np.flatnonzero(accepted)
    # tag_like as positions in the accepted records (a run's first record is always accepted).
    position = np.cumsum(accepted) - 1
    return ScalarRecords(
        record_index=record_index,
        step=step[record_index],
        value=value[record_index],
        tag_start=tag_start[record_index],
        tag_end=tag_end[record_index],
        value_start=value_start[record_index],
        tag_like=position[tag_like[record_index]],
    )


def _cycle_length(buffer: bytes, starts: np.ndarray, lengths: np.ndarray) -> int | None:
    """The shortest cycle (in records) after which, in a sample from the middle of the file, the
    byte distance between records mostly repeats and a record's next few repetitions have its
    layout (tags of one length logged in turn repeat their lengths every record, not their
    bytes), or None (too few records, or no such cycle)."""
    if starts.size < 2 * _MIN_RUN_RECORDS:
        return None
    middle = starts.size // 2
    low = max(0, middle - _PROBE_RECORDS // 2)
    probe = starts[low : middle + _PROBE_RECORDS // 2]
    for period in range(1, _LONGEST_CYCLE_RECORDS + 1):
        stride = probe[period:] - probe[:-period]
        if np.count_nonzero(stride[period:] == stride[:-period]) * 2 <= stride.size:
            continue
        # The first record in the sample that starts a chain of _PROBE_CHAIN_RECORDS at one
        # stride, and is a fast-path record, must match its chain.
        chain_links = period * (_PROBE_CHAIN_RECORDS - 1)
        for first in range(low, min(low + period * 4, starts.size - chain_links)):
            chain = starts[first : first + chain_links + 1 : period]
            steps = np.diff(chain)
            if not np.all(steps == steps[0]):
                continue
            leader = decode_scalar_records(buffer, chain[:1], lengths[first : first + 1])
            if leader.record_index.size == 0:
                continue
            start = int(chain[0])
            if _decode_run(
                buffer,
                start,
                int(lengths[first]),
                _PROBE_CHAIN_RECORDS,
                int(steps[0]),
                int(leader.value_start[0]) - start,
                int(leader.tag_end[0]) - start,
                whole=True,
            ):
                return period
    return None


def _runs(starts: np.ndarray, period: int) -> list[tuple[int, int, int]]:
    """(first record, records, byte stride) of each run of at least _MIN_RUN_RECORDS records
    `period` apart at a constant byte stride; no record is in two runs."""
    runs: list[tuple[int, int, int]] = []
    for phase in range(period):
        offsets = starts[phase::period]
        if offsets.size < _MIN_RUN_RECORDS:
            continue
        stride = np.diff(offsets)
        # stride[k] joins records k and k+1. A run is a stretch of records whose links have one
        # stride; a record where the stride changes starts the next run.
        bounds = np.concatenate(
            ([0], np.flatnonzero(stride[1:] != stride[:-1]) + 1, [offsets.size])
        )
        sizes = np.diff(bounds)
        long_enough = sizes >= _MIN_RUN_RECORDS
        for first, size in zip(
            bounds[:-1][long_enough].tolist(), sizes[long_enough].tolist(), strict=True
        ):
            runs.append((phase + first * period, size, int(stride[first])))
    return runs


def _decode_run(
    buffer: bytes,
    start: int,
    length: int,
    rows_count: int,
    stride: int,
    value_at: int,
    tag_end: int,
    whole: bool = False,
) -> tuple[np.ndarray, np.ndarray] | None:
    """(steps, numbers) of the leading rows of a run that match its first record byte for byte
    outside the wall time, the step varint's payload bits and the number, or None when no row
    after the first does (or, with `whole`, when any row does not). Offsets are relative to the
    payload start `start`."""
    dtype = value_dtype(value_at - tag_end, length - value_at)
    value_end = value_at + np.dtype(dtype).itemsize
    step_bytes = 0
    if buffer[start + _WALL_TIME_END] == 0x10:  # a step; decode_scalar_records took its varint
        while buffer[start + _STEP_VARINT_START + step_bytes] & 0x80:
            step_bytes += 1
        step_bytes += 1
    # The header and payload of each row, copied into whole 8-byte words (zero padded) so that
    # the comparison with the first row runs over contiguous words; the data checksum is left out.
    width = HEADER_BYTES + length
    # A later row may be a shorter record that ends the file: only rows whose first-row-sized
    # span lies inside the buffer are compared (the others take decode_scalar_records).
    fitting = (len(buffer) - (start - HEADER_BYTES) - width) // stride + 1
    if fitting < rows_count:
        if whole or fitting < 2:
            return None
        rows_count = fitting
    rows = np.zeros((rows_count, -(-width // 8) * 8), dtype=np.uint8)
    rows[:, :width] = np.ndarray(
        shape=(rows_count, width),
        dtype=np.uint8,
        buffer=buffer,
        offset=start - HEADER_BYTES,
        strides=(stride, 1),
    )
    # Bits that must equal the first row's: all but the wall time's, the number's, and the step
    # varint's payload bits (its continuation bits must match: the varint keeps its length).
    compared = np.full(rows.shape[1], 0xFF, dtype=np.uint8)
    compared[width:] = 0
    compared[HEADER_BYTES + 1 : HEADER_BYTES + _WALL_TIME_END] = 0
    varint_at = HEADER_BYTES + _STEP_VARINT_START
    compared[varint_at : varint_at + step_bytes] = 0x80
    compared[HEADER_BYTES + value_at : HEADER_BYTES + value_end] = 0
    words = rows.view("<u8")  # (rows' own bytes are overwritten)
    # In place, and OR-ed column by column: a reduction along the short row axis costs more.
    np.bitwise_xor(words, words[0].copy(), out=words)
    np.bitwise_and(words, compared.view("<u8"), out=words)
    differences = words[:, 0].copy()
    for word in range(1, words.shape[1]):
        differences |= words[:, word]
    kept = int(np.argmax(differences != 0)) if differences.any() else rows_count
    if kept < 2 or (whole and kept < rows_count):
        return None

    def column(offset: int, dtype: str) -> np.ndarray:  # rows' field at `offset`, from the file
        return np.ndarray(
            shape=(kept,), dtype=dtype, buffer=buffer, offset=start + offset, strides=(stride,)
        )

    steps = np.zeros(kept, dtype=np.uint64)
    for group in range(step_bytes):
        seven_bits = (column(_STEP_VARINT_START + group, "u1") & 0x7F).astype(np.uint64)
        steps |= seven_bits << np.uint64(7 * group)
    numbers = column(value_at, dtype)
    with np.errstate(invalid="ignore"):  # a signalling NaN in the file stays a NaN
        return steps.astype(np.int64), numbers.astype(np.float64)
