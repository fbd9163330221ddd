"""How far one tensor moved between two consecutive checkpoints, and how its distribution shifted.

    delta_norm             ‖W_t − W_prev‖₂, in float64 chunk by chunk
    update_ratio_per_step  delta_norm / ‖W_prev‖₂ / (step_t − step_prev)
    norm_growth_rate       (‖W_t‖ / ‖W_prev‖) ** (1 / (step_t − step_prev)) − 1
    histogram_kl           KL(hist_t ‖ hist_prev) of the log-magnitude histograms, add-half smoothed

Why the source matters (`delta_source`). A bf16 checkpoint stores each weight rounded to 8
significant bits: one ulp is 2**-7 to 2**-8 of |w| (fp16: 2**-10 to 2**-11). When an element's true
change δ over the window is below an ulp, the stored value either stays or jumps a whole ulp (with
probability ≈ |δ|/ulp), so E[(Δw_bf16)²] ≈ |δ|·ulp, far above δ²: the measured ‖ΔW‖ grows like
√lr instead of lr, and the update ratio is biased upward by about √(ulp/|δ|) — most at small
learning rates and short windows. Above an ulp the bias fades into a noise floor of ≈ 2.3e-3·‖W‖
(two independent roundings, RMS ≈ 1.6e-3·|w| each). (A run trained in pure bf16 without master
weights also loses updates below half an ulp in training; those never reach the weights at all.)
fp32 master weights have neither problem, so they are used whenever both checkpoints hold them.

Float64 weights of any magnitude. The sums of squares are float64: past 2**1024 a square overflows
(the sum turns inf, which shows), below 2**-1022 it loses bits or becomes 0 (which does not: a
subnormal tensor moved by one ulp read ‖ΔW‖ = 0, "frozen"). So each chunk's plain sum is kept
only where it can be trusted (`trusted`), else that sum is redone scaled by a power of two
(`scaled_square_sum`) and carried as a `SquareSum`; ordinary data never leaves the plain sums.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, NamedTuple

import numpy as np
import numpy.typing as npt

from tscope.ingest.checkpoints.stats.array_kernels import _compiled, _factors, widened
from tscope.ingest.checkpoints.stats.chunk_runner import ChunkRunner, Workspace, flat_view
from tscope.ingest.checkpoints.stats.tensor import ORDINARY_EXPONENT, _unscaled, scale_factors

if TYPE_CHECKING:
    import torch

NAN = math.nan
# Pseudo-count added to every histogram bin before the KL divergence, so that a bin empty in
# the previous checkpoint does not make it infinite (add-half, the Jeffreys prior).
HISTOGRAM_SMOOTHING = 0.5

_SHORT_DTYPE = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "float64": "fp64"}
# Significant bits per dtype: the coarser of the two checkpoints limits the diff's precision.
_SIGNIFICANT_BITS = {"float64": 53, "float32": 24, "float16": 11, "bfloat16": 8}
# A plain float64 sum of squares at least this large lost at most n · 2**-1075 to squares below
# float64's range: relative < 2**-600 for any n < 2**50. Below it (0 included) it may be all loss.
TRUSTED_SUM = 2.0 ** (-2 * ORDINARY_EXPONENT)
# Exponent steps taken when two finite parts overflow on adding (SquareSum.plus).
_CARRY = 64
_NO_ARRAY = np.zeros(0, dtype=np.float64)
_BLOCK = 1024  # elements summed apart in the checked loop, as pairwise sums are (numpy, torch)


class SquareSum(NamedTuple):
    """Σx² = value · 4**exponent, i.e. value = Σ(x · 2**-exponent)². Exponent 0 for ordinary
    data; a scaled part's is that of its largest |x| (powers of two: exact, as tensor.py's)."""

    value: float
    exponent: int = 0

    def plus(self, other: SquareSum) -> SquareSum:
        """Both summed at the larger exponent (what falls below float64 there is negligible next
        to the larger part); NaN stays NaN."""
        if other.value == 0.0:
            return self
        if self.value == 0.0:
            return other
        big, small = (self, other) if self.exponent >= other.exponent else (other, self)
        shift = 2 * (small.exponent - big.exponent)  # <= 0: ldexp never overflows
        total = big.value + math.ldexp(small.value, shift)
        if math.isfinite(total) or not (math.isfinite(big.value) and math.isfinite(small.value)):
            return SquareSum(total, big.exponent)
        # Two finite plain parts (each up to 1.8e308) overflowed on adding: carry the exponent.
        total = math.ldexp(big.value, -2 * _CARRY) + math.ldexp(small.value, shift - 2 * _CARRY)
        return SquareSum(total, big.exponent + _CARRY)

    def root(self) -> float:
        """√Σx²: inf only where the norm itself is past float64's range."""
        return _unscaled(math.sqrt(self.value), self.exponent)


def trusted(total: float, wide: bool) -> bool:
    """Whether a plain float64 sum of squares is right to rounding: finite (no square overflowed)
    and, for float64 inputs (`wide`), at least TRUSTED_SUM. Squares of float32/16 values (any,
    subnormals included) neither overflow nor underflow float64; a NaN input is NaN either way."""
    return not wide or (math.isfinite(total) and total >= TRUSTED_SUM)


def _scaled_squares_py(values: Any, minus: Any) -> tuple[float, int]:
    """(Σ(x · 2**-e)², e) for x = values − minus (minus empty: x = values), e the binary exponent
    of max |x|, so every scaled square is <= 1 and the largest >= 1/4. Where an input is NaN/Inf,
    (the plain sum's inf or NaN, 0). Two checked passes: the rare path (plain python that numba
    also compiles)."""
    differ = minus.shape[0] == values.shape[0]
    largest = special = 0.0
    for index in range(values.shape[0]):
        a = np.float64(values[index])
        b = np.float64(minus[index]) if differ else 0.0
        if math.isfinite(a) and math.isfinite(b):
            largest = max(largest, abs(a - b))  # inf where a − b overflows
        else:
            special += (a - b) * (a - b)  # inf, or NaN where a − b is NaN
    if special != 0.0 or largest == 0.0:
        return special, 0
    exponent = 1025 if math.isinf(largest) else math.frexp(largest)[1]  # |a − b| < 2**1025
    first, second = _factors(exponent)
    total = 0.0
    for start in range(0, values.shape[0], _BLOCK):  # blocks: rounding grows ~(block + n/block)
        block = 0.0
        for index in range(start, min(start + _BLOCK, values.shape[0])):
            a = np.float64(values[index])
            b = np.float64(minus[index]) if differ else 0.0
            scaled = (a - b) * first * second
            if math.isinf(scaled):  # a − b overflowed: the halves are exact (|a|, |b| > 2**969)
                scaled = (a * 0.5 - b * 0.5) * (first * 2.0) * second
            block += scaled * scaled
        total += block
    return total, exponent


def _scaled_squares_np(values: Any, minus: Any) -> tuple[float, int]:
    """_scaled_squares_py in numpy (without numba's optional `fast` extra)."""
    a = widened(values)
    b = widened(minus) if minus.shape[0] == a.shape[0] else np.zeros_like(a)
    # Overflowed differences are redone from the halves below; NaN/Inf inputs give the plain sum.
    with np.errstate(over="ignore", invalid="ignore"):
        x = a - b
        special = ~(np.isfinite(a) & np.isfinite(b))
        if special.any():
            return float(np.sum(x[special] * x[special])), 0
    largest = float(np.abs(x).max()) if x.size else 0.0
    if largest == 0.0:
        return 0.0, 0
    exponent = 1025 if math.isinf(largest) else math.frexp(largest)[1]
    first, second = scale_factors(exponent)
    overflowed = np.isinf(x)
    x *= first
    x *= second
    x[overflowed] = (a[overflowed] * 0.5 - b[overflowed] * 0.5) * (first * 2.0) * second
    return float(np.dot(x, x)), exponent


def _same_bits_py(current: Any, previous: Any) -> bool:
    """Whether two uint64 arrays are equal: an OR of XORs, which vectorizes (0.26 ns per element
    here, against 1.15 for _scaled_squares_py's checked pass)."""
    differ = np.uint64(0)
    for index in range(current.shape[0]):
        differ |= current[index] ^ previous[index]
    return bool(differ == 0)


def _same_bits_np(current: Any, previous: Any) -> bool:
    return bool(np.array_equal(current, previous))


_scaled_squares = _compiled(_scaled_squares_py, _scaled_squares_np)
_same_bits = _compiled(_same_bits_py, _same_bits_np)


def scaled_square_sum(values: npt.NDArray[Any], minus: npt.NDArray[Any] | None = None) -> SquareSum:
    """Σ(values − minus)² (Σvalues² without minus) as a SquareSum, right for any finite floats."""
    value, exponent = _scaled_squares(values, _NO_ARRAY if minus is None else minus)
    return SquareSum(float(value), int(exponent))


def square_sum(
    total: float, wide: bool, values: npt.NDArray[Any], minus: npt.NDArray[Any] | None = None
) -> SquareSum:
    """The plain sum `total` of Σ(values − minus)² where it is trusted, else redone scaled."""
    if trusted(total, wide):
        return SquareSum(total)
    # A frozen float64 tensor's Σ(a − b)² is 0, which is never trusted: equal bits settle it at
    # a quarter of the checked pass's cost (a frozen tensor is an ordinary one).
    unchanged = (
        total == 0.0
        and minus is not None
        and values.dtype == minus.dtype == np.float64
        and _same_bits(values.view(np.uint64), minus.view(np.uint64))
    )
    return SquareSum(0.0) if unchanged else scaled_square_sum(values, minus)


@dataclass(frozen=True)
class WeightDelta:
    delta_norm: float = NAN
    update_ratio_per_step: float = NAN
    norm_growth_rate: float = NAN
    histogram_kl: float = NAN
    delta_source: str | None = None  # None: no previous checkpoint holds this tensor


def delta_source_name(current_dtype: str, previous_dtype: str, master: bool) -> str:
    """`fp32_master`, or `weights_<dtype>` of the less precise of the two checkpoints."""
    if master:
        return "fp32_master"
    coarser = min((current_dtype, previous_dtype), key=lambda name: _SIGNIFICANT_BITS.get(name, 0))
    return "weights_" + _SHORT_DTYPE.get(coarser, coarser)


def histogram_kl(current: npt.NDArray[np.int64], previous: npt.NDArray[np.int64]) -> float:
    """KL(p ‖ q) in nats between two count histograms, each smoothed by HISTOGRAM_SMOOTHING."""
    if current.sum() == 0 or previous.sum() == 0:
        return NAN
    p = current.astype(np.float64) + HISTOGRAM_SMOOTHING
    q = previous.astype(np.float64) + HISTOGRAM_SMOOTHING
    p /= p.sum()
    q /= q.sum()
    return float(np.sum(p * np.log(p / q)))


def _delta_chunk(
    workspace: Workspace, current: torch.Tensor, previous: torch.Tensor
) -> tuple[SquareSum, SquareSum, SquareSum]:
    """(Σ(a − b)², Σa², Σb²) over one chunk: plain float64 dot products, redone scaled only
    where one cannot be trusted (float64 weights of extreme magnitude)."""
    import torch

    a = workspace.buffer("wide0", torch.float64, current.numel())
    a.copy_(current)  # widened: (chunk,) float64
    b = workspace.buffer("wide1", torch.float64, previous.numel())
    b.copy_(previous)
    current_sq = float(torch.dot(a, a))
    previous_sq = float(torch.dot(b, b))
    a.sub_(b)
    delta_sq = float(torch.dot(a, a))
    sums = (delta_sq, current_sq, previous_sq)
    wide = torch.float64 in (current.dtype, previous.dtype)
    if all(trusted(total, wide) for total in sums):
        return SquareSum(delta_sq), SquareSum(current_sq), SquareSum(previous_sq)
    a.copy_(current)  # the rare path: the scaled difference needs a again
    x, y = a.numpy(), b.numpy()
    delta = square_sum(delta_sq, wide, x, y)
    return delta, square_sum(current_sq, wide, x), square_sum(previous_sq, wide, y)


def weight_delta(
    current: torch.Tensor,
    previous: torch.Tensor,
    steps: int | None,
    source: str,
    runner: ChunkRunner,
) -> WeightDelta:
    """Norms of W_t − W_prev, ratios per step, for one tensor (same shape in both checkpoints).

    NaN where either side has NaN/Inf (the non-finite count already says so), and ratios NaN when
    the steps between the checkpoints are unknown or not positive.
    """
    if current.shape != previous.shape:
        return WeightDelta(delta_source=source)
    delta_sq = current_sq = previous_sq = SquareSum(0.0)
    for part in runner.map(_delta_chunk, flat_view(current.detach()), flat_view(previous.detach())):
        delta_sq = delta_sq.plus(part[0])
        current_sq = current_sq.plus(part[1])
        previous_sq = previous_sq.plus(part[2])
    return delta_from_sums(delta_sq, current_sq, previous_sq, steps, source)


def delta_from_sums(
    delta_sq: SquareSum | float,
    current_sq: SquareSum | float,
    previous_sq: SquareSum | float,
    steps: int | None,
    source: str,
) -> WeightDelta:
    """The WeightDelta of Σ(a − b)², Σa², Σb² (however they were summed; a float is a plain
    sum). Ratios are taken between the scaled roots, so they hold where a norm leaves float64."""
    delta, current, previous = (
        sums if isinstance(sums, SquareSum) else SquareSum(sums)
        for sums in (delta_sq, current_sq, previous_sq)
    )
    if not all(math.isfinite(sums.value) for sums in (delta, current, previous)):
        return WeightDelta(delta_source=source)
    ratio = growth = NAN
    if steps is not None and steps > 0 and previous.value > 0:
        ratio = _root_ratio(delta, previous) / steps
        growth = _growth(current, previous, steps)
    return WeightDelta(delta.root(), ratio, growth, NAN, source)


def _root_ratio(top: SquareSum, bottom: SquareSum) -> float:
    """√top / √bottom (bottom > 0); plain sums give sqrt(top) / sqrt(bottom) exactly as before."""
    return _unscaled(math.sqrt(top.value) / math.sqrt(bottom.value), top.exponent - bottom.exponent)


def _growth(current: SquareSum, previous: SquareSum, steps: int) -> float:
    """(‖W_t‖ / ‖W_prev‖) ** (1 / steps) − 1. With scaled sums the ratio of the norms may be past
    float64 (1e200 / 1e-200) while its root per step is not: taken through logarithms there."""
    quotient = math.sqrt(current.value) / math.sqrt(previous.value)  # each root within float64
    shift = current.exponent - previous.exponent
    if shift == 0 or quotient == 0.0:
        return float(_unscaled(quotient, shift) ** (1.0 / steps)) - 1.0
    try:
        return math.expm1((math.log(quotient) + shift * math.log(2.0)) / steps)
    except OverflowError:
        return math.inf
