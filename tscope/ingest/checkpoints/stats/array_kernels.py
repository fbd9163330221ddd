"""Compiled one-pass kernels over raw little-endian tensor bytes (numba, GIL released).

Why compiled: on this machine numpy's per-chunk statistics need ~11 passes over float64 copies
and `np.bincount` holds the GIL, so threads do not help; both measured well under 1 GB/s per core,
where one fused loop runs at memory speed (bench/bench_checkpoint_stats.py prints both kernels).
numba is the optional `fast` extra; without it `HAVE_NUMBA` is False and the numpy kernels of the
same signatures below run instead (same results, slower).

Every kernel reduces one chunk to a few numbers; callers merge chunks in order.

* `count_patterns(bits16, counts)`: counts[p] += 1 for each 16-bit pattern (bf16, fp16), exact.
* `float_chunk(values)` (float32 or float64 array): finite count, nonfinite count, exact zeros,
  min, max, mean, and the central sums M2, M3, M4 about the chunk's own mean (two passes over a
  cache-resident chunk), in float64; plus, for float32, counts of the upper 16 bits of |x|.
"""

from __future__ import annotations

import importlib
import math
from collections.abc import Callable
from typing import Any, cast

import numpy as np
import numpy.typing as npt

Kernel = Callable[..., None]
try:
    _numba: Any = importlib.import_module("numba")
except ImportError:  # the optional `fast` extra is not installed
    _numba = None
HAVE_NUMBA = _numba is not None

# Fields of float_chunk's summary vector (float64).
COUNT, NONFINITE, ZEROS, LOW, HIGH, MEAN, M2, M3, M4 = range(9)
SUMMARY_FIELDS = 9
MAGNITUDE_PATTERNS = 1 << 15  # |x|'s upper 16 bits for float32: 0 … 32767


def _count_patterns_py(bits: Any, counts: Any) -> None:
    for index in range(bits.shape[0]):
        counts[bits[index]] += 1


def _float_chunk_py(values: Any, bits32: Any, magnitudes: Any, summary: Any) -> None:
    """summary (9,) of one chunk; magnitudes[|x|'s upper 16 bits] += 1 when bits32 is given.

    Pass 1 (min, max, zeros, sum, magnitude patterns) assumes every value is finite, so its loop
    has no branch; a non-finite sum, min or max (NaN/Inf present, rare) redoes the scalars with
    a check per value. Pass 2 (central sums about the chunk mean) runs over a chunk still in cache.
    """
    size = values.shape[0]
    with_patterns = bits32.shape[0] == size
    total = 0.0
    low = math.inf
    high = -math.inf
    zeros = 0
    for index in range(size):
        wide = np.float64(values[index])
        if with_patterns:
            magnitudes[(bits32[index] >> 16) & 0x7FFF] += 1
        total += wide
        low = min(low, wide)
        high = max(high, wide)
        zeros += wide == 0.0
    count = size
    if not (math.isfinite(total) and math.isfinite(low) and math.isfinite(high)):
        count = 0
        zeros = 0
        total = 0.0
        low = math.inf
        high = -math.inf
        for index in range(size):
            wide = np.float64(values[index])
            if math.isfinite(wide):
                count += 1
                total += wide
                low = min(low, wide)
                high = max(high, wide)
                zeros += wide == 0.0
    mean = total / count if count else 0.0
    m2 = 0.0
    m3 = 0.0
    m4 = 0.0
    for index in range(size):
        centered = np.float64(values[index]) - mean
        if count == size or math.isfinite(centered):
            squared = centered * centered
            m2 += squared
            m3 += squared * centered
            m4 += squared * squared
    summary[0] = count
    summary[1] = size - count
    summary[2] = zeros
    summary[3] = low
    summary[4] = high
    summary[5] = mean
    summary[6] = m2
    summary[7] = m3
    summary[8] = m4


def _delta_chunk_py(current: Any, previous: Any, sums: Any) -> None:
    """sums (3,) += (Σ(a − b)², Σa², Σb²) in float64."""
    delta = 0.0
    current_sq = 0.0
    previous_sq = 0.0
    for index in range(current.shape[0]):
        a = np.float64(current[index])  # float() keeps float32 under numba
        b = np.float64(previous[index])
        delta += (a - b) * (a - b)
        current_sq += a * a
        previous_sq += b * b
    sums[0] += delta
    sums[1] += current_sq
    sums[2] += previous_sq


def _widen_bf16_py(bits: Any, out: Any) -> None:
    for index in range(bits.shape[0]):
        out[index] = np.uint32(bits[index]) << np.uint32(16)


def _count_patterns_np(bits: Any, counts: Any) -> None:
    counts += np.bincount(bits, minlength=counts.shape[0])


def _float_chunk_np(values: Any, bits32: Any, magnitudes: Any, summary: Any) -> None:
    if bits32.shape[0] == values.shape[0]:
        magnitudes += np.bincount((bits32 >> 16) & 0x7FFF, minlength=MAGNITUDE_PATTERNS)
    wide = values.astype(np.float64)
    finite_mask = np.isfinite(wide)
    finite = wide if finite_mask.all() else wide[finite_mask]
    count = finite.size
    summary[:] = 0.0
    summary[COUNT], summary[NONFINITE] = count, wide.size - count
    summary[ZEROS] = np.count_nonzero(finite == 0)
    summary[LOW] = finite.min() if count else math.inf
    summary[HIGH] = finite.max() if count else -math.inf
    if count:
        mean = float(finite.sum()) / count
        centered = finite - mean
        squared = centered * centered
        summary[MEAN], summary[M2] = mean, squared.sum()
        summary[M3], summary[M4] = np.dot(squared, centered), np.dot(squared, squared)


def _delta_chunk_np(current: Any, previous: Any, sums: Any) -> None:
    a = current.astype(np.float64)
    b = previous.astype(np.float64)
    sums[1] += np.dot(a, a)
    sums[2] += np.dot(b, b)
    a -= b
    sums[0] += np.dot(a, a)


def _widen_bf16_np(bits: Any, out: Any) -> None:
    np.left_shift(bits.astype(np.uint32), 16, out=out)


def _compiled(python: Kernel, fallback: Kernel) -> Kernel:
    """The python loop compiled by numba (GIL released), else the numpy version."""
    if _numba is None:
        return fallback
    return cast(Kernel, _numba.njit(nogil=True, cache=True, boundscheck=False)(python))


count_patterns = _compiled(_count_patterns_py, _count_patterns_np)
float_chunk_kernel = _compiled(_float_chunk_py, _float_chunk_np)
delta_chunk_kernel = _compiled(_delta_chunk_py, _delta_chunk_np)
widen_bf16_kernel = _compiled(_widen_bf16_py, _widen_bf16_np)


_NO_BITS = np.zeros(0, dtype=np.uint32)


def float_chunk(
    values: npt.NDArray[Any], with_patterns: bool
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64] | None]:
    """(summary (9,), counts of |x|'s upper 16 bits (32768,) or None) of one float32/64 chunk."""
    summary = np.zeros(SUMMARY_FIELDS, dtype=np.float64)
    if not with_patterns:
        float_chunk_kernel(values, _NO_BITS, np.zeros(1, dtype=np.int64), summary)
        return summary, None
    magnitudes = np.zeros(MAGNITUDE_PATTERNS, dtype=np.int64)
    float_chunk_kernel(values, values.view(np.uint32), magnitudes, summary)
    return summary, magnitudes


def widen_bf16(bits: npt.NDArray[np.uint16]) -> npt.NDArray[np.float32]:
    """bf16 bit patterns as float32 (exact: a bf16 is the upper half of an fp32)."""
    out = np.empty(bits.shape[0], dtype=np.uint32)
    widen_bf16_kernel(bits, out)
    return out.view(np.float32)
