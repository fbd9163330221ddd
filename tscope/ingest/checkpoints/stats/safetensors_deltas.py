"""Weight deltas read from raw safetensors bytes: Σ(a − b)², Σa², Σb² of one tensor in two
checkpoints, chunk by chunk, without torch (weight_deltas.delta_from_sums turns them into the
delta norm and update ratio). Used when both checkpoints store the tensor in safetensors files
and neither holds fp32 master weights (stats/layers.py). Each chunk's plain float64 sums come from
the compiled kernel; a float64 chunk whose sum cannot be trusted (squares past float64's range:
weights beyond ~1e154 or subnormal) has that sum redone scaled (weight_deltas.square_sum)."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.safetensors_header import DTYPES, HeaderEntry
from tscope.ingest.checkpoints.stats import array_kernels as kernels
from tscope.ingest.checkpoints.stats.chunk_runner import DEFAULT_WORKERS
from tscope.ingest.checkpoints.stats.safetensors_scan import (
    READ_BYTES,
    ThreadBuffers,
    advise_sequential,
)
from tscope.ingest.checkpoints.stats.weight_deltas import SquareSum, square_sum, trusted
from tscope.ingest.safe_fs import open_regular


def _widened(data: npt.NDArray[np.uint8], code: str) -> npt.NDArray[Any]:
    if code == "BF16":
        return kernels.widen_bf16(data.view("<u2"))
    return data.view({"F16": "<f2", "F32": "<f4", "F64": "<f8"}[code])


def raw_delta_sums(
    current: tuple[Path, HeaderEntry],
    previous: tuple[Path, HeaderEntry],
    display_path: str,
    workers: int = DEFAULT_WORKERS,
) -> tuple[SquareSum, SquareSum, SquareSum]:
    """(Σ(a − b)², Σa², Σb²) of two same-shape tensors read from their files' bytes."""
    (path_a, entry_a), (path_b, entry_b) = current, previous
    numel = (entry_a.end - entry_a.start) // DTYPES[entry_a.dtype][1]
    size_a, size_b = DTYPES[entry_a.dtype][1], DTYPES[entry_b.dtype][1]
    step = max(1, READ_BYTES // max(size_a, size_b))  # elements per read, either side
    with open_regular(path_a, display_path) as file_a, open_regular(path_b, display_path) as file_b:
        advise_sequential(file_a.fileno())
        advise_sequential(file_b.fileno())
        buffers_a, buffers_b = ThreadBuffers(), ThreadBuffers()

        def read(handle: Any, buffers: ThreadBuffers, length: int, start: int) -> Any:
            view = buffers.get(length)
            if os.preadv(handle.fileno(), [view.data], start) != length:
                raise UnreadableInput(display_path, "cut short while it was read")
            return view

        def work(first: int) -> Part:
            count = min(step, numel - first)
            raw_a = read(file_a, buffers_a, count * size_a, entry_a.start + first * size_a)
            raw_b = read(file_b, buffers_b, count * size_b, entry_b.start + first * size_b)
            sums = np.zeros(3, dtype=np.float64)
            a, b = _widened(raw_a, entry_a.dtype), _widened(raw_b, entry_b.dtype)
            with np.errstate(invalid="ignore"):  # a signaling NaN: a quiet one, no warning
                a = a.astype(np.float32) if a.dtype == np.float16 else a
                b = b.astype(np.float32) if b.dtype == np.float16 else b
            kernels.delta_chunk_kernel(a, b, sums)
            wide = a.dtype == np.float64 or b.dtype == np.float64
            delta_sq, a_sq, b_sq = sums.tolist()
            if trusted(delta_sq, wide) and trusted(a_sq, wide) and trusted(b_sq, wide):
                return sums  # the common chunk: its plain sums, nothing built per chunk
            return (square_sum(delta_sq, wide, a, b), square_sum(a_sq, wide, a),
                    square_sum(b_sq, wide, b))  # fmt: skip

        firsts = range(0, numel, step)
        if workers <= 1 or len(firsts) == 1:
            parts = [work(first) for first in firsts]
        else:
            with ThreadPoolExecutor(workers, "tscope-delta") as pool:
                parts = list(pool.map(work, firsts))
    return _merged(parts)


# A chunk's sums: plain float64 (3,) where trusted, else SquareSums (weight_deltas.square_sum).
Part = npt.NDArray[np.float64] | tuple[SquareSum, SquareSum, SquareSum]


def _merged(parts: list[Part]) -> tuple[SquareSum, SquareSum, SquareSum]:
    """The chunks' sums added: the plain ones in one numpy sum, as ever, unless that is not finite
    (trusted parts of float64 beyond ~1e150 overflowing together, or NaN), then one by one."""
    plain = [part for part in parts if isinstance(part, np.ndarray)]
    with np.errstate(over="ignore", invalid="ignore"):
        total = np.sum(plain, axis=0) if plain else np.zeros(3)
    one_by_one = not np.isfinite(total).all()
    sums = [SquareSum(0.0 if one_by_one else float(value)) for value in total]
    for part in parts:
        if isinstance(part, np.ndarray) and not one_by_one:
            continue
        chunk = [SquareSum(float(v)) for v in part] if isinstance(part, np.ndarray) else part
        sums = [held.plus(piece) for held, piece in zip(sums, chunk, strict=True)]
    return sums[0], sums[1], sums[2]
