"""Per-tensor statistics of a safetensors file without torch: raw bytes, compiled kernels, threads.

The header is JSON (safetensors_header.read_header checks it); the data are raw little-endian
elements. The file is cut into spans: a slice of one large tensor (SPAN_BYTES), or several whole
small tensors side by side (up to READ_BYTES). Each worker thread reads its span with
`os.preadv` into its own reused READ_BYTES buffer (no shared file position, no allocation, the
GIL released while it waits) and reduces it with the kernels of array_kernels (GIL released
while they run); the main thread merges the pieces of each tensor in file order, so the result
does not depend on thread timing. At most 2 × workers spans are in flight: memory is bounded by
the workers' buffers and the spans' small tables, never by the tensor or the file.

Statistics are those of tensor_stats.TensorStats, equal to the torch path within float64 rounding:
16-bit floats (BF16, F16) by a count per bit pattern (exact, as there); F32 and F64 by float64
moments merged across chunks (Pébay 2008), the F32 histogram from the upper 16 bits of |x|; small
tensors (under SMALL_TENSOR_ELEMENTS) go through the same float kernel after an exact widening,
so a file of a million tiny tensors never allocates a 65,536-pattern table per tensor; a span of
small same-dtype tensors is reduced in one compiled call (array_kernels' segments kernel: the
same loops per tensor, one call per span), so the per-tensor cost left is the merge in Python. Other
dtypes (F8, integers, BOOL) are not handled here: `SCANNED_DTYPES` lists what is.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import threading
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np
import numpy.typing as npt

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.safetensors_header import DTYPES, HeaderEntry, read_header
from tscope.ingest.checkpoints.stats import array_kernels as kernels
from tscope.ingest.checkpoints.stats.chunk_runner import DEFAULT_WORKERS
from tscope.ingest.checkpoints.stats.tensor import (
    _UNDERFLOW_BIN,
    LOG_HISTOGRAM_BINS,
    LOG_HISTOGRAM_EDGES,
    TensorStats,
    _finish,
    _Moments,
    _pattern_table,
    _stats_from_patterns,
    log_histogram_bin,
)
from tscope.ingest.safe_fs import open_regular

# Reads go into one reused READ_BYTES buffer per worker thread (os.preadv, no allocation, no
# page faults): 1 MiB stays in a core's L2 (1 MiB here) between the read's copy and the kernels'
# passes over it, where 4 MiB reads fell out to L3. A large tensor is cut into SPAN_BYTES spans
# (the unit a thread takes, read in READ_BYTES steps into one running summary), so the fixed
# cost of a span (a future, a fresh 512 KB pattern table, a merge) is paid per 32 MiB; small tensors
# are grouped up to READ_BYTES per span and read at once. Memory: workers × READ_BYTES plus
# 2 × workers spans' tables in flight.
READ_BYTES = 1 << 20
SPAN_BYTES = 32 << 20
# Below this many elements a 16-bit tensor is widened and reduced like a float32 one (its
# statistics are the same within float64 rounding): a pattern table (65,536 counts) per tiny
# tensor would cost more than the tensor.
SMALL_TENSOR_ELEMENTS = 1 << 14
# Spans of a large tensor are mapped (mmap, read-only) instead of read: the kernels then read the
# page cache's own pages, and the copy a read makes, which was a quarter to a half of the scan's
# CPU time (bench/bench_checkpoint_stats.py), is gone. A span's mapping lives while a worker
# reduces it, so at most workers × SPAN_BYTES are mapped at once (resident set bounded as before).
# The file's size is checked before each span is mapped; a file cut shorter by another process
# while a span is mapped raises SIGBUS, as torch's mmap loads of .pt files do (docs/security.md).
MAP_LARGE_SPANS = True

SCANNED_DTYPES = ("BF16", "F16", "F32", "F64")
_TORCH_NAMES = {code: DTYPES[code][0] for code in SCANNED_DTYPES}


class _Piece(NamedTuple):  # a tuple: built once per tensor, 100,000s of them in a large file
    entry: int  # index into the scanned entries
    start: int  # byte offsets inside the span
    stop: int
    last: bool  # the entry's final piece


def _spans(entries: list[HeaderEntry]) -> Iterator[tuple[int, int, list[_Piece]]]:
    """(file start, file stop, pieces) covering the entries (sorted by offset) in file order."""
    span_start = span_stop = -1
    pieces: list[_Piece] = []
    for index, entry in enumerate(entries):
        size = entry.end - entry.start
        element = DTYPES[entry.dtype][1]
        if pieces and (entry.start != span_stop or span_stop - span_start + size > READ_BYTES):
            yield span_start, span_stop, pieces
            pieces = []
        if size > READ_BYTES:  # a large tensor: spans of whole elements, read in steps
            step = SPAN_BYTES - SPAN_BYTES % element
            for offset in range(entry.start, entry.end, step):
                stop = min(offset + step, entry.end)
                yield offset, stop, [_Piece(index, 0, stop - offset, stop == entry.end)]
            continue
        if not pieces:
            span_start = span_stop = entry.start
        pieces.append(_Piece(index, span_stop - span_start, span_stop - span_start + size, True))
        span_stop += size
    if pieces:
        yield span_start, span_stop, pieces


@dataclass
class _Partial:
    """One piece's running reduction; the kind depends on the tensor, never on the piece, so all
    pieces of a tensor merge alike.

    kind "patterns": counts (65,536) per 16-bit pattern · "magnitudes": summary (9,) and counts
    (32,768) of |x|'s upper 16 bits (fp32) · "histogram": summary and LOG_HISTOGRAM_BINS counts.
    """

    kind: str
    summary: npt.NDArray[np.float64] | None
    counts: npt.NDArray[np.int64]


def _new_partial(code: str, numel: int) -> _Partial:
    if code in ("BF16", "F16") and numel >= SMALL_TENSOR_ELEMENTS:
        return _Partial("patterns", None, np.zeros(1 << 16, dtype=np.int64))
    if code == "F32" and numel >= SMALL_TENSOR_ELEMENTS:
        return _Partial(
            "magnitudes",
            kernels.empty_summary(),
            np.zeros(kernels.MAGNITUDE_PATTERNS, dtype=np.int64),
        )
    return _Partial("histogram", kernels.empty_summary(), np.zeros(LOG_HISTOGRAM_BINS, np.int64))


_NO_BITS = np.zeros(0, dtype=np.uint32)
_NO_COUNTS = np.zeros(1, dtype=np.int64)


def _float_values(data: npt.NDArray[np.uint8], code: str) -> npt.NDArray[Any]:
    """Raw little-endian bytes as float32 (BF16, F16: exact widenings), F32 or F64 values."""
    if code == "BF16":
        return kernels.widen_bf16(data.view("<u2"))
    if code == "F16":
        with np.errstate(invalid="ignore"):  # a signaling NaN widens to a quiet one, no warning
            return data.view("<f2").astype(np.float32)
    return data.view("<f4" if code == "F32" else "<f8")


def _reduce_into(data: npt.NDArray[np.uint8], code: str, partial: _Partial) -> None:
    """Merge one run of a tensor's raw little-endian bytes (whole elements) into its partial."""
    if partial.kind == "patterns":
        kernels.count_patterns(data.view("<u2"), partial.counts)
        return
    values = _float_values(data, code)
    assert partial.summary is not None
    if partial.kind == "magnitudes":
        kernels.float_chunk_kernel(values, values.view(np.uint32), partial.counts, partial.summary)
        return
    # fp64 (no bf16 shortcut) and small tensors: bin each |x| directly, 67 counts
    kernels.float_chunk_kernel(values, _NO_BITS, _NO_COUNTS, partial.summary)
    bins = log_histogram_bin(np.abs(kernels.widened(values)))
    partial.counts += np.bincount(bins[bins >= 0], minlength=LOG_HISTOGRAM_BINS)


def _batched(
    data: npt.NDArray[np.uint8], entries: list[HeaderEntry], numels: list[int], pieces: list[_Piece]
) -> list[_Partial] | None:
    """The partials of a span of small same-dtype tensors side by side, reduced in one compiled
    call (the loops of one call per tensor, so the same results); None where that does not apply
    (no numba, mixed dtypes, a tensor large enough for a pattern table)."""
    code = entries[pieces[0].entry].dtype
    if kernels.segments_kernel is None or any(
        entries[p.entry].dtype != code or numels[p.entry] >= SMALL_TENSOR_ELEMENTS for p in pieces
    ):
        return None
    element = DTYPES[code][1]
    first = pieces[0].start
    run = data[first : pieces[-1].stop]
    values = _float_values(run, code)
    bounds = np.fromiter(
        (0, *((p.stop - first) // element for p in pieces)), dtype=np.int64, count=len(pieces) + 1
    )
    summaries = np.zeros((len(pieces), kernels.SUMMARY_FIELDS), dtype=np.float64)
    summaries[:, kernels.LOW], summaries[:, kernels.HIGH] = np.inf, -np.inf
    histograms = np.zeros((len(pieces), LOG_HISTOGRAM_BINS), dtype=np.int64)
    kernels.segments_kernel(values, bounds, _EDGES, summaries, histograms)
    return [_Partial("histogram", summaries[i], histograms[i]) for i in range(len(pieces))]


_EDGES = np.asarray(LOG_HISTOGRAM_EDGES, dtype=np.float64)


class _Accumulator:
    """The merged pieces of one tensor so far."""

    def __init__(self, entry: HeaderEntry) -> None:
        self.entry = entry
        self.patterns: npt.NDArray[np.int64] | None = None
        self.moments = _Moments()
        self.nonfinite = 0
        self.zeros = 0
        self.magnitudes: npt.NDArray[np.int64] | None = None  # (32768,) |x|'s upper 16 bits
        self.histogram = np.zeros(LOG_HISTOGRAM_BINS, dtype=np.int64)

    def add(self, partial: _Partial) -> None:
        kind, summary, counts = partial.kind, partial.summary, partial.counts
        if kind == "patterns":
            if self.patterns is None:
                self.patterns = counts
            else:
                self.patterns += counts  # in place: no fresh 512 KB table per span
            return
        assert summary is not None
        count, nonfinite, zeros, low, high, mean, m2, m3, m4, scale = summary.tolist()  # one call
        self.moments.merge(_Moments(int(count), mean, m2, m3, m4, low, high, int(scale)))
        self.nonfinite += int(nonfinite)
        self.zeros += int(zeros)
        if kind == "histogram":
            self.histogram += counts
        else:
            if self.magnitudes is None:
                self.magnitudes = counts
            else:
                self.magnitudes += counts

    def finish(self) -> TensorStats:
        entry = self.entry
        dtype = _TORCH_NAMES[entry.dtype]
        numel = (entry.end - entry.start) // DTYPES[entry.dtype][1]
        if self.patterns is not None:
            return _stats_from_patterns(dtype, numel, self.patterns)
        histogram = self.histogram.copy()
        if self.magnitudes is not None:  # |x|'s non-negative bf16 patterns (see tensor_stats)
            table = _pattern_table("bfloat16")
            keep = table.finite[: 1 << 15]
            bins = np.where(table.bins[: 1 << 15] == 0, _UNDERFLOW_BIN, table.bins[: 1 << 15])
            from_patterns = (
                np.bincount(bins[keep], weights=self.magnitudes[keep], minlength=LOG_HISTOGRAM_BINS)
                .round()
                .astype(np.int64)
            )
            from_patterns[_UNDERFLOW_BIN] -= self.zeros - int(histogram[0])
            from_patterns[0] = 0
            histogram += from_patterns
            histogram[0] = self.zeros
        return _finish(dtype, numel, self.moments, self.nonfinite, self.zeros, histogram)


def scan_safetensors(
    path: Path, display_path: str, workers: int = DEFAULT_WORKERS
) -> Iterator[tuple[str, TensorStats]]:
    """(name, statistics) of every tensor of a SCANNED_DTYPES dtype, in file order.

    Tensors of other dtypes are skipped (callers read them through the torch path).
    UnreadableInput if the header is malformed or the file is cut short.
    """
    entries = read_header(path, display_path).entries
    yield from scan_entries(path, display_path, entries, workers)


def scan_entries(
    path: Path, display_path: str, entries: list[HeaderEntry], workers: int = DEFAULT_WORKERS
) -> Iterator[tuple[str, TensorStats]]:
    """(header name, statistics) of these entries of one file (SCANNED_DTYPES only), file order."""
    entries = sorted(
        (e for e in entries if e.dtype in SCANNED_DTYPES), key=lambda e: (e.start, e.end)
    )
    numels = [(e.end - e.start) // DTYPES[e.dtype][1] for e in entries]
    with open_regular(path, display_path) as handle:
        descriptor = handle.fileno()
        if entries and os.fstat(descriptor).st_size < entries[-1].end:
            raise UnreadableInput(display_path, "cut short: its header lists bytes past its end")
        advise_sequential(descriptor)
        buffers = ThreadBuffers()

        def read(start: int, stop: int) -> npt.NDArray[np.uint8]:
            view = buffers.get(stop - start)
            if os.preadv(descriptor, [view.data], start) != stop - start:
                raise UnreadableInput(display_path, "cut short while it was read")
            return view

        def work(start: int, stop: int, pieces: list[_Piece]) -> list[_Partial]:
            data = read(start, stop) if len(pieces) > 1 else None
            if data is not None:
                batched = _batched(data, entries, numels, pieces)
                if batched is not None:
                    return batched
            partials = [_new_partial(entries[p.entry].dtype, numels[p.entry]) for p in pieces]
            if len(pieces) == 1 and stop - start > READ_BYTES:  # a slice of one large tensor
                code = entries[pieces[0].entry].dtype
                step = READ_BYTES - READ_BYTES % DTYPES[code][1]
                if MAP_LARGE_SPANS:
                    _reduce_mapped(descriptor, display_path, start, stop, step, code, partials[0])
                    return partials
                for offset in range(start, stop, step):
                    _reduce_into(read(offset, min(offset + step, stop)), code, partials[0])
                return partials
            if data is None:
                data = read(start, stop)
            for piece, partial in zip(pieces, partials, strict=True):
                _reduce_into(data[piece.start : piece.stop], entries[piece.entry].dtype, partial)
            return partials

        yield from _merge_in_order(entries, _spans(entries), work, workers)
        for entry in entries:  # zero-byte tensors have no span
            if entry.end == entry.start:
                yield entry.name, _Accumulator(entry).finish()


def _reduce_mapped(
    descriptor: int, display_path: str, start: int, stop: int, step: int, code: str,
    partial: _Partial,
) -> None:  # fmt: skip
    """Reduce bytes [start, stop) of the file, mapped read-only, into the partial: the kernels
    read the page cache's own pages, so no copy is made (see MAP_LARGE_SPANS). 16-bit patterns
    are counted in one call over the span; the float kernels, two passes each, take `step`
    bytes at a time so their second pass finds the bytes in the core's cache."""
    if os.fstat(descriptor).st_size < stop:
        raise UnreadableInput(display_path, "cut short while it was read")
    base = start - start % mmap.ALLOCATIONGRANULARITY
    region = mmap.mmap(descriptor, stop - base, access=mmap.ACCESS_READ, offset=base)
    try:
        data = np.frombuffer(region, dtype=np.uint8, count=stop - start, offset=start - base)
        if partial.kind == "patterns":
            step = stop - start
        for offset in range(0, stop - start, step):
            _reduce_into(data[offset : offset + step], code, partial)
        del data
    finally:
        # A view still alive (an exception's traceback holds one) keeps the mapping open; the
        # garbage collector unmaps it with the last view.
        with contextlib.suppress(BufferError):
            region.close()


class ThreadBuffers:
    """One READ_BYTES read buffer per worker thread, allocated once and reused for every read."""

    def __init__(self) -> None:
        self._local = threading.local()

    def get(self, length: int) -> npt.NDArray[np.uint8]:
        held: npt.NDArray[np.uint8] | None = getattr(self._local, "buffer", None)
        if held is None or held.shape[0] < length:
            held = np.empty(max(length, READ_BYTES), dtype=np.uint8)
            self._local.buffer = held
        return held[:length]


def advise_sequential(descriptor: int) -> None:
    """Tell the kernel the file is read front to back (larger read-ahead when it is not cached)."""
    advise = getattr(os, "posix_fadvise", None)  # not on macOS/Windows
    if advise is not None:
        advise(descriptor, 0, 0, os.POSIX_FADV_SEQUENTIAL)


def _merge_in_order(
    entries: list[HeaderEntry],
    spans: Iterator[tuple[int, int, list[_Piece]]],
    run: Callable[[int, int, list[_Piece]], list[_Partial]],
    workers: int,
) -> Iterator[tuple[str, TensorStats]]:
    open_tensors: dict[int, _Accumulator] = {}

    def collect(
        pieces: list[_Piece], partials: list[_Partial]
    ) -> Iterator[tuple[str, TensorStats]]:
        for piece, partial in zip(pieces, partials, strict=True):
            accumulator = open_tensors.get(piece.entry)
            if accumulator is None:
                accumulator = open_tensors[piece.entry] = _Accumulator(entries[piece.entry])
            accumulator.add(partial)
            if piece.last:
                del open_tensors[piece.entry]
                yield accumulator.entry.name, accumulator.finish()

    if workers <= 1:
        for start, stop, pieces in spans:
            yield from collect(pieces, run(start, stop, pieces))
        return
    with ThreadPoolExecutor(workers, "tscope-scan") as pool:
        pending: deque[tuple[list[_Piece], Future[list[_Partial]]]] = deque()
        for start, stop, pieces in spans:
            pending.append((pieces, pool.submit(run, start, stop, pieces)))
            if len(pending) >= 2 * workers:
                done_pieces, future = pending.popleft()
                yield from collect(done_pieces, future.result())
        while pending:
            done_pieces, future = pending.popleft()
            yield from collect(done_pieces, future.result())
