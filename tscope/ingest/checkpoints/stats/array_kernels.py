"""Compiled kernels over raw little-endian tensor bytes (numba, GIL released).

Why compiled: numpy's per-chunk statistics need ~11 passes over float64 copies and
`np.bincount` holds the GIL, so threads do not help; bench/bench_checkpoint_stats.py --numpy
prints both. numba is the optional `fast` extra; without it `HAVE_NUMBA` is False and the numpy
kernels of the same signatures below run instead (same results within float64 rounding).

* `count_patterns(bits16, counts)`: counts[p] += 1 for each 16-bit pattern (bf16, fp16), exact.
* `float_chunk_kernel(values, bits32, magnitudes, summary)` (float32 or float64 chunk): merges
  the chunk's finite count, nonfinite count, exact zeros, min, max, mean and central sums M2,
  M3, M4 (two passes over the cache-resident chunk: its mean, then sums about it; Pébay's
  pairwise merge into the running summary) into `summary`; for float32 also counts the upper
  16 bits of |x| into `magnitudes` (a scalar loop: the scattered count is the one per-element
  cost that does not vectorize) and takes min/max from integer keys of the bits (vectorized).

Summation order. The sums are compiled with reassociation, so LLVM adds in vector lanes (4-8
partial sums, combined at the end): 5x faster than one running sum, whose add latency bounds the
loop (measured 0.21 against 1.05 ns per element for M2-M4). The order is fixed by the compiled
code, so a result repeats exactly run to run, thread timing never matters, and it differs from
the torch path and the numpy fallback (pairwise sums) by float64 rounding only: tests hold them
within rel 1e-9 (bench/check_checkpoint_stats_equal.py compares whole layers tables).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any, TypeVar, cast

import numpy as np
import numpy.typing as npt

from tscope.ingest.checkpoints.stats.tensor import rescaled, scale_exponent, scale_factors
from tscope.numba_loader import load_numba

Kernel = TypeVar("Kernel", bound=Callable[..., Any])
_numba: Any = load_numba()  # None without the optional `fast` extra
HAVE_NUMBA = _numba is not None

# Fields of float_chunk's summary vector (float64). MEAN and M2-M4 are those of x · 2**-SCALE,
# SCALE 0 but for float64 chunks of extreme magnitude (tensor.scale_exponent says why).
COUNT, NONFINITE, ZEROS, LOW, HIGH, MEAN, M2, M3, M4, SCALE = range(10)
SUMMARY_FIELDS = 10
MAGNITUDE_PATTERNS = 1 << 15  # |x|'s upper 16 bits for float32: 0 … 32767


def _count_patterns_py(bits: Any, counts: Any) -> None:
    for index in range(bits.shape[0]):
        counts[bits[index]] += 1


def _count_magnitudes_py(bits32: Any, magnitudes: Any) -> None:
    """magnitudes[|x|'s upper 16 bits] += 1: one scattered count per element, the loop's whole
    work (0.35-0.40 ns per element here). The chunk's min and max are not taken in this loop: a
    float compare chain is not vectorized (numba gives LLVM no no-NaN promise for it) and took
    the loop from 0.40 to 1.15 ns per element (measured 2026-12-02, this 2-core AVX-512
    machine); _bits_min_max takes them in a vectorized pass instead."""
    for index in range(bits32.shape[0]):
        magnitudes[(bits32[index] >> 16) & 0x7FFF] += 1


def _bits_min_max_py(values: Any, bits32: Any) -> tuple[float, float]:
    """(min, max) of a non-empty float32 chunk from its bits; meaningful only when the chunk is
    all finite (the caller discards them otherwise).

    Each pattern maps to a uint32 key in the floats' order (non-negative: sign bit set;
    negative: every bit flipped), whose min and max reductions vectorize: 0.06 ns per element
    against 1.15 for the float compare loop (the key kept in 32 bits: 0.20 in 64). The result
    is the value the in-order compare loop (`low = x if x < low else low`) gives: a non-zero
    extreme has one bit pattern; where the extreme is zero the keys order -0.0 below +0.0, but
    the loop keeps the first zero it meets, so that zero is looked up.
    """
    low_key = np.uint32(0xFFFFFFFF)
    high_key = np.uint32(0)
    for index in range(bits32.shape[0]):
        pattern = bits32[index]
        negative = np.uint32(np.int32(pattern) >> np.int32(31))  # all ones for a negative
        key = np.uint32(pattern ^ np.uint32(np.uint32(0x80000000) | (negative & 0x7FFFFFFF)))
        low_key = min(low_key, key)
        high_key = max(high_key, key)
    extremes = np.empty(2, dtype=np.uint32)
    for slot, key in enumerate((low_key, high_key)):
        flip = 0x80000000 if key >= 0x80000000 else 0xFFFFFFFF  # the key's own inverse
        extremes[slot] = np.uint32(key ^ np.uint32(flip))
    as_floats = extremes.view(np.float32)
    low = np.float64(as_floats[0])
    high = np.float64(as_floats[1])
    if low == 0.0 or high == 0.0:
        first_zero = np.float64(0.0)
        for index in range(values.shape[0]):
            if values[index] == 0.0:
                first_zero = np.float64(values[index])
                break
        low = first_zero if low == 0.0 else low
        high = first_zero if high == 0.0 else high
    return low, high


def _sum_and_zeros_py(values: Any) -> tuple[float, int]:
    """(Σx in float64, exact zeros); compiled with reassociation, i.e. summed in vector lanes."""
    total = 0.0
    zeros = 0
    for index in range(values.shape[0]):
        wide = np.float64(values[index])
        total += wide
        zeros += wide == 0.0
    return total, zeros


def _min_max_py(values: Any) -> tuple[float, float]:
    """(min, max) of a non-empty chunk known to be all finite (compiled assuming no NaN)."""
    low = values[0]
    high = values[0]
    for index in range(values.shape[0]):
        value = values[index]
        low = min(low, value)
        high = max(high, value)
    return np.float64(low), np.float64(high)


def _central_sums_py(values: Any, mean: float) -> tuple[float, float, float]:
    """(M2, M3, M4) about `mean` of an all-finite chunk, in float64 vector lanes."""
    m2 = 0.0
    m3 = 0.0
    m4 = 0.0
    for index in range(values.shape[0]):
        centered = np.float64(values[index]) - mean
        squared = centered * centered
        m2 += squared
        m3 += squared * centered
        m4 += squared * squared
    return m2, m3, m4


def _finite_summary_py(
    values: Any,
) -> tuple[int, float, float, float, int, float, float, float, int]:
    """(count, mean, low, high, zeros, M2, M3, M4, scale exponent) over the finite values only:
    a check per value, in order (the rare chunk holding NaN/Inf, or extreme float64 values)."""
    count = zeros = 0
    low, high = math.inf, -math.inf
    for index in range(values.shape[0]):
        wide = np.float64(values[index])
        if math.isfinite(wide):
            count += 1
            low = min(low, wide)
            high = max(high, wide)
            zeros += wide == 0.0
    exponent = _scale_exponent(low, high) if count else 0
    first, second = _factors(exponent)
    total = 0.0
    for index in range(values.shape[0]):
        wide = np.float64(values[index])
        if math.isfinite(wide):
            total += wide * first * second
    mean = total / count if count else 0.0
    m2 = m3 = m4 = 0.0
    for index in range(values.shape[0]):
        centered = np.float64(values[index]) * first * second - mean
        if math.isfinite(centered):
            squared = centered * centered
            m2 += squared
            m3 += squared * centered
            m4 += squared * squared
    return count, mean, low, high, zeros, m2, m3, m4, exponent


def _merge_summary_py(
    summary: Any, count: int, nonfinite: int, zeros: int, low: float, high: float,
    mean: float, m2: float, m3: float, m4: float, exponent: int,
) -> None:  # fmt: skip
    """summary (10,) ← summary merged with one chunk's (Pébay 2008, eqs. 2.1-2.3; as _Moments),
    both first brought to the larger scale exponent (exact powers of two; what falls below
    float64 there is negligible next to the larger side's values)."""
    summary[NONFINITE] += nonfinite
    summary[ZEROS] += zeros
    if count == 0:
        return
    na = summary[COUNT]
    if na == 0:
        summary[COUNT], summary[LOW], summary[HIGH] = count, low, high
        summary[MEAN], summary[M2], summary[M3], summary[M4] = mean, m2, m3, m4
        summary[SCALE] = exponent
        return
    held = int(summary[SCALE])
    if exponent < held:  # rare: only where a float64 chunk was scaled
        mean, m2, m3, m4 = _rescaled(mean, m2, m3, m4, exponent - held)
    elif exponent > held:
        a = _rescaled(summary[MEAN], summary[M2], summary[M3], summary[M4], held - exponent)
        summary[MEAN], summary[M2], summary[M3], summary[M4] = a
        summary[SCALE] = exponent
    nb = np.float64(count)
    n = na + nb
    delta = mean - summary[MEAN]
    d_n = delta / n
    a2, a3, a4 = summary[M2], summary[M3], summary[M4]
    summary[M4] = (
        a4 + m4
        + delta * d_n**3 * na * nb * (na * na - na * nb + nb * nb)
        + 6.0 * d_n * d_n * (na * na * m2 + nb * nb * a2)
        + 4.0 * d_n * (na * m3 - nb * a3)
    )  # fmt: skip
    summary[M3] = (
        a3 + m3 + delta * d_n * d_n * na * nb * (na - nb) + 3.0 * d_n * (na * m2 - nb * a2)
    )
    summary[M2] = a2 + m2 + delta * d_n * na * nb
    summary[MEAN] += d_n * nb
    summary[COUNT] = n
    summary[LOW] = min(summary[LOW], low)
    summary[HIGH] = max(summary[HIGH], high)


def _float_chunk_py(values: Any, bits32: Any, magnitudes: Any, summary: Any) -> None:
    """Merge one float32/64 chunk into the running summary (9,); magnitudes[|x|'s upper 16 bits]
    += 1 when bits32 (the chunk's fp32 bits) is given.

    A finite Σx means every value is finite (NaN and ±Inf make any sum non-finite), so the common
    chunk takes separate branch-free loops that the compiler vectorizes (reassociated sums, see
    the module docstring); a chunk with NaN/Inf (or a float64 chunk whose sum overflows) takes
    the checked loop. Both are two passes (mean, then central sums) over a chunk in cache. A
    float64 chunk whose largest |x| is outside 2**±ORDINARY_EXPONENT also takes the checked
    loop, which sums x · 2**-e (see SCALE); the test is one compare per chunk.
    """
    size = values.shape[0]
    if size == 0:
        return
    ranged = bits32.shape[0] == size
    if ranged:  # the vectorized pass first: it brings a mapped chunk into the core's cache
        low, high = _bits_min_max(values, bits32)
        _count_magnitudes(bits32, magnitudes)
    total, zeros = _sum_and_zeros(values)
    if math.isfinite(total):
        if not ranged:
            low, high = _min_max(values)
        if ranged or _scale_exponent(low, high) == 0:
            mean = total / size
            m2, m3, m4 = _central_sums(values, mean)
            _merge_summary(summary, size, 0, zeros, low, high, mean, m2, m3, m4, 0)
            return
    count, mean, low, high, zeros, m2, m3, m4, exponent = _finite_summary(values)
    _merge_summary(summary, count, size - count, zeros, low, high, mean, m2, m3, m4, exponent)


def _segments_py(values: Any, bounds: Any, edges: Any, summaries: Any, histograms: Any) -> None:
    """For each segment k = values[bounds[k]:bounds[k + 1]] (a small tensor): summaries[k] (9,)
    as float_chunk_kernel merges it into an empty summary, and histograms[k] its log-magnitude
    bins (tensor.log_histogram_bin over `edges`). One call for a span of many small tensors: a
    file of a million 4-element tensors pays the per-call cost once per span, not per tensor."""
    no_bits = np.zeros(0, dtype=np.uint32)  # local: numba freezes global arrays read-only
    no_counts = np.zeros(1, dtype=np.int64)
    for segment in range(bounds.shape[0] - 1):
        chunk = values[bounds[segment] : bounds[segment + 1]]
        _float_chunk(chunk, no_bits, no_counts, summaries[segment])
        for index in range(chunk.shape[0]):
            magnitude = abs(np.float64(chunk[index]))
            if magnitude == 0.0:
                histograms[segment, 0] += 1
            elif math.isfinite(magnitude):
                histograms[segment, 1 + np.searchsorted(edges, magnitude, side="right")] += 1


def _delta_chunk_py(current: Any, previous: Any, sums: Any) -> None:
    """sums (3,) += (Σ(a − b)², Σa², Σb²) in plain float64: the fast path. Squares of float64
    beyond 2**±511 leave float64's range, so the callers check each sum (weight_deltas.trusted)
    and redo an untrusted one scaled by a power of two (weight_deltas.scaled_square_sum)."""
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
    if values.shape[0] == 0:
        return
    if bits32.shape[0] == values.shape[0]:
        magnitudes += np.bincount((bits32 >> 16) & 0x7FFF, minlength=MAGNITUDE_PATTERNS)
    wide = widened(values)
    finite_mask = np.isfinite(wide)
    finite = wide if finite_mask.all() else wide[finite_mask]
    count = finite.size
    if count == 0:
        _merge_summary_py(summary, 0, wide.size, 0, math.inf, -math.inf, 0.0, 0.0, 0.0, 0.0, 0)
        return
    low, high = float(finite.min()), float(finite.max())
    exponent = scale_exponent(low, high)
    zeros = int(np.count_nonzero(finite == 0))
    if exponent:  # as _finite_summary_py
        first, second = scale_factors(exponent)
        finite = finite * first * second
    mean = float(finite.sum()) / count
    centered = finite - mean
    squared = centered * centered
    _merge_summary_py(
        summary, count, wide.size - count, zeros, low, high, mean, float(squared.sum()),
        float(np.dot(squared, centered)), float(np.dot(squared, squared)), exponent,
    )  # fmt: skip


def _delta_chunk_np(current: Any, previous: Any, sums: Any) -> None:
    a, b = widened(current), widened(previous)
    # NaN/Inf and overflowing squares make a sum non-finite (redone scaled where the inputs were
    # finite, as _delta_chunk_py says): the flags numpy would print as warnings say nothing more.
    with np.errstate(invalid="ignore", over="ignore"):
        sums[1] += np.dot(a, a)
        sums[2] += np.dot(b, b)
        a -= b
        sums[0] += np.dot(a, a)


def _widen_bf16_np(bits: Any, out: Any) -> None:
    np.left_shift(bits.astype(np.uint32), 16, out=out)


def _compiled(python: Kernel, fallback: Kernel, fastmath: frozenset[str] = frozenset()) -> Kernel:
    """The python loop compiled by numba (GIL released), else the numpy version."""
    if _numba is None:
        return fallback
    compile_ = _numba.njit(nogil=True, cache=True, boundscheck=False, fastmath=set(fastmath))
    return cast(Kernel, compile_(python))


# Reassociation (and signed zeros) only: the loops may sum in vector lanes, in an order fixed by
# the compiled code, so results repeat exactly run to run and chunk timing never matters. No
# "no-NaN/no-Inf" assumption where a NaN could arrive: those loops must see NaN to send the chunk
# to the checked path. _min_max runs only on chunks already known to be finite.
_LANES = frozenset({"reassoc", "nsz"})
_NO_NAN = frozenset({"reassoc", "nsz", "nnan"})
# Helpers first: the compiled kernels below call them by their global names.
_count_magnitudes = _compiled(_count_magnitudes_py, _count_magnitudes_py)
_bits_min_max = _compiled(_bits_min_max_py, _bits_min_max_py)
_sum_and_zeros = _compiled(_sum_and_zeros_py, _sum_and_zeros_py, _LANES)
_min_max = _compiled(_min_max_py, _min_max_py, _NO_NAN)
_central_sums = _compiled(_central_sums_py, _central_sums_py, _LANES)
_scale_exponent = _compiled(scale_exponent, scale_exponent)
_factors = _compiled(scale_factors, scale_factors)
_rescaled = _compiled(rescaled, rescaled)
_finite_summary = _compiled(_finite_summary_py, _finite_summary_py)
_merge_summary = _compiled(_merge_summary_py, _merge_summary_py)
count_patterns = _compiled(_count_patterns_py, _count_patterns_np)
float_chunk_kernel = _compiled(_float_chunk_py, _float_chunk_np)
_float_chunk = float_chunk_kernel  # the name _segments_py calls
segments_kernel = _compiled(_segments_py, _segments_py) if HAVE_NUMBA else None
delta_chunk_kernel = _compiled(_delta_chunk_py, _delta_chunk_np, _LANES)
widen_bf16_kernel = _compiled(_widen_bf16_py, _widen_bf16_np)


def widened(values: npt.NDArray[Any]) -> npt.NDArray[np.float64]:
    """values as float64, exactly. Widening a signaling NaN raises IEEE 754's invalid flag (numpy
    would print a RuntimeWarning); it becomes a quiet NaN, which is only counted as non-finite."""
    with np.errstate(invalid="ignore"):
        return values.astype(np.float64)


def empty_summary() -> npt.NDArray[np.float64]:
    """A running summary (10,) of no values yet: float_chunk_kernel merges chunks into it."""
    summary = np.zeros(SUMMARY_FIELDS, dtype=np.float64)
    summary[LOW], summary[HIGH] = math.inf, -math.inf
    return summary


_NO_BITS = np.zeros(0, dtype=np.uint32)


def float_chunk(
    values: npt.NDArray[Any], with_patterns: bool
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.int64] | None]:
    """(summary (9,), counts of |x|'s upper 16 bits (32768,) or None) of one float32/64 chunk."""
    summary = empty_summary()
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
