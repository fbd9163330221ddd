"""Statistics of one tensor in one streaming pass over fixed-size chunks (never a widened copy).

Two kernels, chosen by dtype:

* 16-bit floats (bf16, fp16) have only 65,536 bit patterns. Each chunk is reduced to a count per
  pattern (one `bincount`); every statistic then follows from the counts and the exact value of each
  pattern, in float64. The result is exact and independent of the chunk size, and nothing wider
  than an int32 copy of one chunk ever exists.
* Other floats (fp32, fp64; fp8 and integers are widened to fp64 per chunk) are widened to float64
  one chunk at a time for the moments, which are merged across chunks with the pairwise formulas of
  Chan et al. / Pébay (2008). For fp32 the log-magnitude histogram comes from a bincount of the
  upper 16 bits of |x| (its bf16 truncation); that is exact because every histogram edge is itself
  a bf16 value (see LOG_HISTOGRAM_EDGES).

Statistics are over finite values; NaN/Inf are counted apart. `std` is the population standard
deviation (ddof=0), `excess_kurtosis` is m4/m2² − 3 (0 for a Gaussian, −1.2 for a uniform).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import cache
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

from tscope.ingest.checkpoints.stats.chunk_runner import (
    PATTERN_CHUNK_ELEMENTS,
    ChunkRunner,
    Workspace,
    flat_view,
)

if TYPE_CHECKING:
    import torch


def _round_to_bf16(values: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Round to the nearest bf16 value (ties to even), done on the float32 bit pattern."""
    bits = values.astype(np.float32).view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16) << 16
    return rounded.astype(np.uint32).view(np.float32).astype(np.float64)


# Log-magnitude histogram edges: 10**(k/4) for k = -48 … 16 (1e-12 … 1e4, quarter-decade steps),
# each rounded to the nearest bf16 value (at most 0.4 % off), 65 edges, 67 bins:
#   bin 0          x == 0 exactly
#   bin 1          0 < |x| < EDGES[0]                     (underflow, subnormals)
#   bin i + 2      EDGES[i] <= |x| < EDGES[i + 1], i = 0 … 63
#   bin 66         |x| >= EDGES[64]                       (overflow, finite)
# NaN/Inf are in no bin (nonfinite_count). Edges on the bf16 grid make the fp32 histogram exact
# from the upper 16 bits of |x|: truncating |x| to bf16 never crosses a bf16 edge.
LOG_HISTOGRAM_EDGES: tuple[float, ...] = tuple(
    float(v) for v in _round_to_bf16(10.0 ** (np.arange(-48, 17, dtype=np.float64) / 4))
)
LOG_HISTOGRAM_BINS = len(LOG_HISTOGRAM_EDGES) + 2
_UNDERFLOW_BIN = 1


def log_histogram_bin(magnitudes: npt.NDArray[np.float64]) -> npt.NDArray[np.int64]:
    """Histogram bin of each |x| (as above); -1 for NaN/Inf."""
    edges = np.asarray(LOG_HISTOGRAM_EDGES)
    bins = 1 + np.searchsorted(edges, magnitudes, side="right").astype(np.int64)
    bins[magnitudes == 0] = 0
    bins[~np.isfinite(magnitudes)] = -1
    return bins


@dataclass(frozen=True)
class TensorStats:
    """One tensor's statistics; float64, over finite values; NaN where undefined."""

    dtype: str  # "float32", "bfloat16", ...
    numel: int
    l2_norm: float
    rms: float
    mean: float
    std: float  # population (ddof=0)
    min: float
    max: float
    max_abs: float
    nonfinite_count: int
    zero_fraction: float  # exact zeros / numel
    excess_kurtosis: float
    log_histogram: npt.NDArray[np.int64] = field(repr=False)  # (LOG_HISTOGRAM_BINS,) counts


# Moments are summed in float64: Σx⁴ of 1e100 or Σx² of 1e200 overflow, and those of subnormals
# underflow to 0. Where a part's largest |x| lies outside 2**±ORDINARY_EXPONENT (float64 data only:
# every float32, subnormals included, lies inside; n·(2·max)**4 stays finite for n < 2**50 and
# max**4 normal) it keeps the moments of x · 2**-e instead, e the binary exponent of its max |x|;
# parts merge at the larger e. Powers of two: exact, and ordinary data (e = 0) is untouched.
ORDINARY_EXPONENT = 200


def scale_exponent(low: float, high: float) -> int:
    """0 where the moments of finite values in [low, high] fit float64 unscaled, else e with
    max|x| · 2**-e in [0.5, 1). Plain Python that numba also compiles (array_kernels)."""
    largest = max(-low, high)
    if largest == 0.0 or 2.0**-ORDINARY_EXPONENT <= largest <= 2.0**ORDINARY_EXPONENT:
        return 0
    return math.frexp(largest)[1]


def scale_factors(exponent: int) -> tuple[float, float]:
    """2**-exponent as two float64 factors: alone it may be none (2**1074 for subnormals)."""
    half = -exponent // 2
    return math.ldexp(1.0, half), math.ldexp(1.0, -exponent - half)


def rescaled(
    mean: float, m2: float, m3: float, m4: float, shift: int
) -> tuple[float, float, float, float]:
    """The mean and M2-M4 of x · 2**shift (shift <= 0) from those of x: exact, or below float64's
    range, i.e. negligible next to the part that set the larger exponent."""
    return (math.ldexp(mean, shift), math.ldexp(m2, 2 * shift), math.ldexp(m3, 3 * shift),
            math.ldexp(m4, 4 * shift))  # fmt: skip


def _unscaled(value: float, exponent: int) -> float:
    """value · 2**exponent; inf past float64's range (math.ldexp would raise there)."""
    first, second = scale_factors(-exponent)
    return value * first * second


@dataclass
class _Moments:
    """Count, mean and central moment sums M2..M4 of finite values · 2**-exponent (see
    ORDINARY_EXPONENT); min/max (unscaled); merged in order."""

    count: int = 0
    mean: float = 0.0
    m2: float = 0.0
    m3: float = 0.0
    m4: float = 0.0
    low: float = math.inf
    high: float = -math.inf
    exponent: int = 0

    def merge(self, other: _Moments) -> None:
        """Pairwise update (Pébay 2008, eqs. 2.1-2.3): exact algebra, stable in float64."""
        na, nb = self.count, other.count
        if nb == 0:
            return
        if na == 0:
            self.__dict__.update(other.__dict__)
            return
        a_mean, a2, a3, a4 = self.mean, self.m2, self.m3, self.m4
        b_mean, b2, b3, b4 = other.mean, other.m2, other.m3, other.m4
        if other.exponent < self.exponent:  # only float64 parts of extreme magnitude
            b_mean, b2, b3, b4 = rescaled(b_mean, b2, b3, b4, other.exponent - self.exponent)
        elif other.exponent > self.exponent:
            a_mean, a2, a3, a4 = rescaled(a_mean, a2, a3, a4, self.exponent - other.exponent)
            self.exponent = other.exponent
        n = na + nb
        delta = b_mean - a_mean
        d_n = delta / n
        m2 = a2 + b2 + delta * d_n * na * nb
        m3 = a3 + b3 + delta * d_n * d_n * na * nb * (na - nb) + 3.0 * d_n * (na * b2 - nb * a2)
        m4 = (
            a4
            + b4
            + delta * d_n**3 * na * nb * (na * na - na * nb + nb * nb)
            + 6.0 * d_n * d_n * (na * na * b2 + nb * nb * a2)
            + 4.0 * d_n * (na * b3 - nb * a3)
        )
        self.count, self.mean, self.m2, self.m3, self.m4 = n, a_mean + d_n * nb, m2, m3, m4
        self.low, self.high = min(self.low, other.low), max(self.high, other.high)


# ---- 16-bit floats: a count per bit pattern ---------------------------------------------------


@dataclass(frozen=True)
class _PatternTable:
    values: npt.NDArray[np.float64]  # (65536,) the exact value of each bit pattern
    finite: npt.NDArray[np.bool_]
    bins: npt.NDArray[np.int64]  # log-histogram bin per pattern, -1 for NaN/Inf


@cache
def _pattern_table(dtype_name: str) -> _PatternTable:
    patterns = np.arange(1 << 16, dtype=np.uint32)
    with np.errstate(invalid="ignore"):  # the NaN patterns widen to NaN, as they should
        if dtype_name == "bfloat16":  # bf16 is the upper half of an fp32
            values = (patterns << 16).view(np.float32).astype(np.float64)
        else:
            values = patterns.astype(np.uint16).view(np.float16).astype(np.float64)
    finite = np.isfinite(values)
    return _PatternTable(values, finite, log_histogram_bin(np.abs(values)))


def _pattern_chunk(workspace: Workspace, chunk: torch.Tensor) -> torch.Tensor:
    """(65536,) int64 counts of each bit pattern in a bf16/fp16 chunk."""
    import torch

    patterns = workspace.buffer("ints", torch.int32, chunk.numel())
    patterns.copy_(chunk.view(torch.uint16))  # zero-extended: 0 … 65535
    return torch.bincount(patterns, minlength=1 << 16)


def _stats_from_patterns(dtype: str, numel: int, counts: npt.NDArray[np.int64]) -> TensorStats:
    table = _pattern_table(dtype)
    present = (counts > 0) & table.finite
    weights = counts[present].astype(np.float64)
    values = table.values[present]
    histogram = np.bincount(
        table.bins[table.finite], weights=counts[table.finite], minlength=LOG_HISTOGRAM_BINS
    )
    moments = _Moments()
    finite_count = int(counts[table.finite].sum())
    if finite_count:
        mean = float(np.dot(weights, values)) / finite_count
        centered = values - mean
        squared = centered * centered
        moments = _Moments(
            count=finite_count,
            mean=mean,
            m2=float(np.dot(weights, squared)),
            m3=float(np.dot(weights, squared * centered)),
            m4=float(np.dot(weights, squared * squared)),
            low=float(values.min()),
            high=float(values.max()),
        )
    return _finish(
        dtype,
        numel,
        moments,
        nonfinite=numel - finite_count,
        zeros=int(histogram[0]),
        histogram=histogram.round().astype(np.int64),
    )


# ---- fp32 / fp64: float64 moments per chunk, histogram from the upper bits -------------------


@dataclass
class _FloatPart:
    moments: _Moments
    nonfinite: int
    zeros: int
    magnitude_patterns: torch.Tensor | None  # (32768,) counts of |x|'s upper 16 bits (fp32)
    histogram: npt.NDArray[np.int64] | None  # (LOG_HISTOGRAM_BINS,) counts (fp64 path)


def _float_chunk(workspace: Workspace, chunk: torch.Tensor) -> _FloatPart:
    import torch

    if chunk.dtype not in (torch.float32, torch.float64):  # fp8, ints, bool: widen exactly
        widened = workspace.buffer("wide2", torch.float64, chunk.numel())
        widened.copy_(chunk)
        chunk = widened
    low, high = (float(v) for v in torch.aminmax(chunk))
    finite = chunk
    nonfinite = 0
    if not (math.isfinite(low) and math.isfinite(high)):  # rare: NaN/Inf present
        finite = chunk[torch.isfinite(chunk)]
        nonfinite = chunk.numel() - finite.numel()
        if finite.numel():
            low, high = (float(v) for v in torch.aminmax(finite))
    moments = _Moments()
    if finite.numel():
        centered = workspace.buffer("wide0", torch.float64, finite.numel())
        centered.copy_(finite)  # widened: (chunk,) float64
        exponent = scale_exponent(low, high)
        if exponent:  # float64 of extreme magnitude: moments of x · 2**-exponent
            first, second = scale_factors(exponent)
            centered.mul_(first).mul_(second)
        mean = float(centered.sum()) / finite.numel()
        centered.sub_(mean)
        squared = workspace.buffer("wide1", torch.float64, finite.numel())
        torch.mul(centered, centered, out=squared)
        moments = _Moments(
            count=finite.numel(),
            mean=mean,
            m2=float(squared.sum()),
            m3=float(torch.dot(squared, centered)),
            m4=float(torch.dot(squared, squared)),
            low=low,
            high=high,
            exponent=exponent,
        )
    if chunk.dtype == torch.float32:
        upper = workspace.buffer("ints", torch.int32, chunk.numel())
        torch.bitwise_right_shift(chunk.view(torch.int32), 16, out=upper)
        upper.bitwise_and_(0x7FFF)  # |x| truncated to bf16: 0 … 32767
        patterns = torch.bincount(upper, minlength=1 << 15)
        # Pattern 0 holds exact zeros and |x| < 2**-133; count zeros exactly only when needed.
        zeros = int((chunk == 0).sum()) if int(patterns[0]) else 0
        return _FloatPart(moments, nonfinite, zeros, patterns, None)
    magnitudes = finite.abs()
    bins = torch.bucketize(magnitudes, _edges_tensor(), right=True).add_(1)
    bins.masked_fill_(magnitudes == 0, 0)
    histogram = torch.bincount(bins, minlength=LOG_HISTOGRAM_BINS).numpy().astype(np.int64)
    return _FloatPart(moments, nonfinite, int(histogram[0]), None, histogram)


@cache
def _edges_tensor() -> torch.Tensor:
    import torch

    return torch.tensor(LOG_HISTOGRAM_EDGES, dtype=torch.float64)


def _float_stats(runner: ChunkRunner, flat: torch.Tensor, dtype: str) -> TensorStats:
    import torch

    moments = _Moments()
    nonfinite = zeros = 0
    patterns = torch.zeros(1 << 15, dtype=torch.int64)
    histogram = np.zeros(LOG_HISTOGRAM_BINS, dtype=np.int64)
    for part in runner.map(_float_chunk, flat):
        moments.merge(part.moments)
        nonfinite += part.nonfinite
        zeros += part.zeros
        if part.magnitude_patterns is not None:
            patterns += part.magnitude_patterns
        if part.histogram is not None:
            histogram += part.histogram
    if flat.dtype == torch.float32:
        table = _pattern_table("bfloat16")  # magnitudes are the non-negative bf16 patterns
        counts = patterns.numpy()
        keep = table.finite[: 1 << 15]
        histogram = np.bincount(
            np.where(table.bins[: 1 << 15] == 0, _UNDERFLOW_BIN, table.bins[: 1 << 15])[keep],
            weights=counts[keep],
            minlength=LOG_HISTOGRAM_BINS,
        )
        histogram = histogram.round().astype(np.int64)
        histogram[_UNDERFLOW_BIN] -= zeros
        histogram[0] = zeros
    return _finish(dtype, flat.numel(), moments, nonfinite, zeros, histogram)


def _finish(
    dtype: str,
    numel: int,
    moments: _Moments,
    nonfinite: int,
    zeros: int,
    histogram: npt.NDArray[np.int64],
) -> TensorStats:
    n = moments.count
    nan = math.nan
    if n == 0:
        return TensorStats(dtype, numel, nan, nan, nan, nan, nan, nan, nan, nonfinite,
                           zeros / numel if numel else nan, nan, histogram)  # fmt: skip
    sum_squares = moments.m2 + n * moments.mean * moments.mean  # Σx² without cancellation
    variance = moments.m2 / n
    kurtosis = n * moments.m4 / (moments.m2 * moments.m2) - 3.0 if moments.m2 > 0 else nan
    shown = [math.sqrt(sum_squares), math.sqrt(sum_squares / n), moments.mean, math.sqrt(variance)]
    if moments.exponent:  # moments of x · 2**-exponent (float64 of extreme magnitude)
        shown = [_unscaled(value, moments.exponent) for value in shown]
    l2_norm, rms, mean, std = shown
    return TensorStats(
        dtype=dtype,
        numel=numel,
        l2_norm=l2_norm,
        rms=rms,
        mean=mean,
        std=std,
        min=moments.low,
        max=moments.high,
        max_abs=max(abs(moments.low), abs(moments.high)),
        nonfinite_count=nonfinite,
        zero_fraction=zeros / numel,
        excess_kurtosis=kurtosis,
        log_histogram=histogram,
    )


def dtype_name(tensor: torch.Tensor) -> str:
    return str(tensor.dtype).removeprefix("torch.")


def tensor_stats(tensor: torch.Tensor, runner: ChunkRunner | None = None) -> TensorStats:
    """Statistics of one tensor (any shape, CPU), chunk by chunk; see the module docstring."""
    import torch

    if tensor.is_complex():
        raise ValueError(f"complex tensors have no log-magnitude statistics ({tensor.dtype})")
    own_runner = runner is None
    runner = runner or ChunkRunner()
    try:
        flat = flat_view(tensor.detach())
        dtype = dtype_name(tensor)
        if tensor.dtype in (torch.bfloat16, torch.float16):
            counts = torch.zeros(1 << 16, dtype=torch.int64)
            for part in runner.map(_pattern_chunk, flat, chunk=PATTERN_CHUNK_ELEMENTS):
                counts += part
            return _stats_from_patterns(dtype, flat.numel(), counts.numpy())
        return _float_stats(runner, flat, dtype)
    finally:
        if own_runner:
            runner.close()
