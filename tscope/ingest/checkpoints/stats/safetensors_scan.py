"""Per-tensor statistics of a safetensors file without torch: raw bytes, compiled kernels, threads.

The header is JSON (safetensors_header.read_header checks it); the data are raw little-endian
elements. The file is cut into spans of about SPAN_BYTES: a slice of one large tensor, or several
whole small tensors side by side. Each worker thread reads its span with `os.pread` (no shared
file position, the GIL released while it waits) and reduces it with the kernels of
array_kernels (GIL released while they run); the main thread merges the pieces of each tensor in
file order, so the result does not depend on thread timing. At most 2 × workers spans are in
flight: memory is bounded by them (a few × SPAN_BYTES), never by the tensor or the file.

Statistics are those of tensor_stats.TensorStats, equal to the torch path within float64 rounding:
16-bit floats (BF16, F16) by a count per bit pattern (exact, as there); F32 and F64 by float64
moments merged across chunks (Pébay 2008), the F32 histogram from the upper 16 bits of |x|; small
tensors (under SMALL_TENSOR_ELEMENTS) go through the same float kernel after an exact widening,
so a file of a million tiny tensors never allocates a 65,536-pattern table per tensor. Other
dtypes (F8, integers, BOOL) are not handled here: `SCANNED_DTYPES` lists what is.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.safetensors_header import DTYPES, HeaderEntry, read_header
from tscope.ingest.checkpoints.stats import array_kernels as kernels
from tscope.ingest.checkpoints.stats.chunk_runner import DEFAULT_WORKERS
from tscope.ingest.checkpoints.stats.tensor import (
    _UNDERFLOW_BIN,
    LOG_HISTOGRAM_BINS,
    TensorStats,
    _finish,
    _Moments,
    _pattern_table,
    _stats_from_patterns,
    log_histogram_bin,
)
from tscope.ingest.safe_fs import open_regular

# 4 MiB spans: large enough that a span's fixed cost (a pread, a future, a few numpy calls;
# ~30 µs) is under 3 % of its 1 ms of kernel time, small enough that 2 × workers of them stay
# in the caches' neighbourhood and memory stays a few tens of MB.
SPAN_BYTES = 4 << 20
# Below this many elements a 16-bit tensor is widened and reduced like a float32 one (its
# statistics are the same within float64 rounding): a pattern table (65,536 counts) per tiny
# tensor would cost more than the tensor.
SMALL_TENSOR_ELEMENTS = 1 << 14
SCANNED_DTYPES = ("BF16", "F16", "F32", "F64")
_TORCH_NAMES = {code: DTYPES[code][0] for code in SCANNED_DTYPES}


@dataclass(frozen=True)
class _Piece:
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
        if pieces and (entry.start != span_stop or span_stop - span_start + size > SPAN_BYTES):
            yield span_start, span_stop, pieces
            pieces = []
        if size > SPAN_BYTES:  # a large tensor: spans of whole elements
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


# ("patterns", None, 65,536 counts) | ("magnitudes", summary, 32,768 counts of |x|'s upper
# 16 bits) | ("histogram", summary, LOG_HISTOGRAM_BINS counts)
_Partial = tuple[str, npt.NDArray[np.float64] | None, npt.NDArray[np.int64]]


def _reduce(data: memoryview, code: str, numel: int) -> _Partial:
    """The kernel's summary of one piece (raw little-endian bytes) of a tensor of numel elements.

    The kind depends on the tensor, never on the piece, so all pieces of a tensor merge alike.
    """
    if code in ("BF16", "F16") and numel >= SMALL_TENSOR_ELEMENTS:
        counts = np.zeros(1 << 16, dtype=np.int64)
        kernels.count_patterns(np.frombuffer(data, dtype="<u2"), counts)
        return "patterns", None, counts
    if code == "BF16":
        values = kernels.widen_bf16(np.frombuffer(data, dtype="<u2"))
    elif code == "F16":
        values = np.frombuffer(data, dtype="<f2").astype(np.float32)  # exact
    else:
        values = np.frombuffer(data, dtype="<f4" if code == "F32" else "<f8")
    if code == "F32" and numel >= SMALL_TENSOR_ELEMENTS:
        summary, magnitudes = kernels.float_chunk(values, with_patterns=True)
        assert magnitudes is not None
        return "magnitudes", summary, magnitudes
    # fp64 (no bf16 shortcut) and small tensors: bin each |x| directly, 67 counts
    summary, _ = kernels.float_chunk(values, with_patterns=False)
    bins = log_histogram_bin(np.abs(values.astype(np.float64)))
    return "histogram", summary, np.bincount(bins[bins >= 0], minlength=LOG_HISTOGRAM_BINS)


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
        kind, summary, counts = partial
        if kind == "patterns":
            self.patterns = counts if self.patterns is None else self.patterns + counts
            return
        assert summary is not None
        self.moments.merge(
            _Moments(
                count=int(summary[kernels.COUNT]),
                mean=float(summary[kernels.MEAN]),
                m2=float(summary[kernels.M2]),
                m3=float(summary[kernels.M3]),
                m4=float(summary[kernels.M4]),
                low=float(summary[kernels.LOW]),
                high=float(summary[kernels.HIGH]),
            )
        )
        self.nonfinite += int(summary[kernels.NONFINITE])
        self.zeros += int(summary[kernels.ZEROS])
        if kind == "histogram":
            self.histogram += counts
        else:
            self.magnitudes = counts if self.magnitudes is None else self.magnitudes + counts

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

        def work(start: int, stop: int, pieces: list[_Piece]) -> list[_Partial]:
            data = memoryview(os.pread(descriptor, stop - start, start))
            if len(data) != stop - start:
                raise UnreadableInput(display_path, "cut short while it was read")
            return [
                _reduce(data[p.start : p.stop], entries[p.entry].dtype, numels[p.entry])
                for p in pieces
            ]

        yield from _merge_in_order(entries, _spans(entries), work, workers)
        for entry in entries:  # zero-byte tensors have no span
            if entry.end == entry.start:
                yield entry.name, _Accumulator(entry).finish()


def _widened(data: bytes, code: str) -> npt.NDArray[Any]:
    if code == "BF16":
        return kernels.widen_bf16(np.frombuffer(data, dtype="<u2"))
    return np.frombuffer(data, dtype={"F16": "<f2", "F32": "<f4", "F64": "<f8"}[code])


def raw_delta_sums(
    current: tuple[Path, HeaderEntry],
    previous: tuple[Path, HeaderEntry],
    display_path: str,
    workers: int = DEFAULT_WORKERS,
) -> tuple[float, float, float]:
    """(Σ(a − b)², Σa², Σb²) in float64 of two same-shape tensors read from their files' bytes."""
    (path_a, entry_a), (path_b, entry_b) = current, previous
    numel = (entry_a.end - entry_a.start) // DTYPES[entry_a.dtype][1]
    step = max(1, SPAN_BYTES // 8)  # elements per span (either side at most 8 bytes each)
    size_a, size_b = DTYPES[entry_a.dtype][1], DTYPES[entry_b.dtype][1]
    with open_regular(path_a, display_path) as file_a, open_regular(path_b, display_path) as file_b:

        def work(first: int) -> npt.NDArray[np.float64]:
            count = min(step, numel - first)
            raw_a = os.pread(file_a.fileno(), count * size_a, entry_a.start + first * size_a)
            raw_b = os.pread(file_b.fileno(), count * size_b, entry_b.start + first * size_b)
            if len(raw_a) != count * size_a or len(raw_b) != count * size_b:
                raise UnreadableInput(display_path, "cut short while it was read")
            sums = np.zeros(3, dtype=np.float64)
            a, b = _widened(raw_a, entry_a.dtype), _widened(raw_b, entry_b.dtype)
            if a.dtype == np.float16:
                a = a.astype(np.float32)
            if b.dtype == np.float16:
                b = b.astype(np.float32)
            kernels.delta_chunk_kernel(a, b, sums)
            return sums

        firsts = range(0, numel, step)
        if workers <= 1 or len(firsts) == 1:
            parts = [work(first) for first in firsts]
        else:
            with ThreadPoolExecutor(workers, "tscope-delta") as pool:
                parts = list(pool.map(work, firsts))
    total = np.sum(parts, axis=0) if parts else np.zeros(3)
    return float(total[0]), float(total[1]), float(total[2])


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
