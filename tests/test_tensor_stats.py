"""The streaming statistics of one tensor: planted tensors with known answers, dtypes, NaN/Inf,
histograms at their bin edges, chunk size and worker count, histogram KL.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import scipy.stats
import torch

from tscope.ingest.checkpoints.stats.chunk_runner import ChunkRunner
from tscope.ingest.checkpoints.stats.tensor import (
    LOG_HISTOGRAM_BINS,
    LOG_HISTOGRAM_EDGES,
    TensorStats,
    tensor_stats,
)
from tscope.ingest.checkpoints.stats.weight_deltas import histogram_kl


def reference(values: np.ndarray) -> dict[str, float]:
    """The statistics computed the plain way, in float64, over finite values."""
    finite = values[np.isfinite(values)].astype(np.float64)
    return {
        "mean": finite.mean(),
        "std": finite.std(),
        "l2_norm": float(np.sqrt(np.sum(finite**2))),
        "rms": float(np.sqrt(np.mean(finite**2))),
        "min": finite.min(),
        "max": finite.max(),
        "excess_kurtosis": float(scipy.stats.kurtosis(finite)),
    }


def reference_histogram(values: np.ndarray) -> np.ndarray:
    magnitudes = np.abs(values[np.isfinite(values)].astype(np.float64))
    bins = 1 + np.searchsorted(np.asarray(LOG_HISTOGRAM_EDGES), magnitudes, side="right")
    bins[magnitudes == 0] = 0
    return np.bincount(bins, minlength=LOG_HISTOGRAM_BINS)


def stats_of(tensor: torch.Tensor, chunk_elements: int = 1 << 12, workers: int = 2) -> TensorStats:
    with ChunkRunner(chunk_elements, workers) as runner:
        return tensor_stats(tensor, runner)


def test_a_two_point_tensor_has_the_textbook_moments():
    # Values ±1 around 3: mean 3, std 1, excess kurtosis exactly -2 (the minimum possible).
    values = torch.tensor([2.0, 4.0] * 5000, dtype=torch.float32)
    stats = stats_of(values)
    assert stats.mean == pytest.approx(3.0, abs=1e-12)
    assert stats.std == pytest.approx(1.0, abs=1e-12)
    assert stats.excess_kurtosis == pytest.approx(-2.0, abs=1e-9)
    assert stats.l2_norm == pytest.approx(math.sqrt(10000 * 10.0), rel=1e-12)
    assert (stats.min, stats.max, stats.max_abs) == (2.0, 4.0, 4.0)
    assert stats.numel == 10000 and stats.nonfinite_count == 0 and stats.zero_fraction == 0


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_a_heavy_tailed_tensor_matches_the_float64_reference(dtype):
    generator = torch.Generator().manual_seed(0)
    # Student-t with 5 degrees of freedom: excess kurtosis 6 in the limit, clearly non-Gaussian.
    sample = scipy.stats.t.rvs(5, size=50_001, random_state=1) * 0.02 + 0.003
    tensor = torch.tensor(sample, dtype=torch.float64).to(dtype)
    tensor[torch.randint(0, 50_001, (50,), generator=generator)] = 0.0
    stats = stats_of(tensor)
    values = tensor.double().numpy()
    expected = reference(values)
    for key, value in expected.items():
        assert getattr(stats, key) == pytest.approx(value, rel=1e-9, abs=1e-15), key
    assert stats.excess_kurtosis > 2
    assert stats.zero_fraction == np.count_nonzero(values == 0) / values.size
    assert np.array_equal(stats.log_histogram, reference_histogram(values))
    assert stats.dtype == str(dtype).removeprefix("torch.")


def test_bf16_statistics_equal_the_fp32_ones_within_bf16_precision():
    generator = torch.Generator().manual_seed(1)
    weights = torch.randn(200_000, generator=generator) * 0.02 + 0.005
    exact, rounded = stats_of(weights), stats_of(weights.to(torch.bfloat16))
    bf16_eps = 2.0**-8
    for key in ("l2_norm", "rms", "std", "min", "max", "max_abs"):
        assert getattr(rounded, key) == pytest.approx(getattr(exact, key), rel=bf16_eps), key
    assert rounded.mean == pytest.approx(exact.mean, abs=bf16_eps * exact.std)
    assert rounded.excess_kurtosis == pytest.approx(exact.excess_kurtosis, abs=0.02)
    # Rounding moves only elements within 0.4 % of an edge into the neighbouring bin.
    moved = np.abs(rounded.log_histogram - exact.log_histogram).sum()
    assert rounded.log_histogram.sum() == exact.log_histogram.sum()
    assert moved < 0.01 * weights.numel()


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.bfloat16, torch.float16])
def test_nan_and_inf_are_counted_apart_and_left_out_of_every_statistic(dtype):
    clean = torch.linspace(-1.0, 1.0, 10_001, dtype=torch.float64).to(dtype)
    dirty = clean.clone()
    dirty[[3, 500, 9000]] = float("nan")
    dirty[[7, 8]] = float("inf")
    dirty[9999] = float("-inf")
    stats = stats_of(dirty)
    expected = reference(dirty.double().numpy())
    assert stats.nonfinite_count == 6
    assert stats.numel == 10_001
    for key, value in expected.items():
        assert getattr(stats, key) == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert stats.log_histogram.sum() == 10_001 - 6


@pytest.mark.parametrize("dtype", [torch.float8_e4m3fn, torch.int8, torch.int64, torch.bool])
def test_other_dtypes_are_widened_per_chunk_and_match_the_reference(dtype):
    generator = torch.Generator().manual_seed(6)
    sample = torch.randn(20_000, generator=generator) * 3
    tensor = sample > 2 if dtype == torch.bool else sample.to(dtype)  # a bool mask: 25 % set
    stats = stats_of(tensor)
    values = tensor.double().numpy()
    for key, value in reference(values).items():
        assert getattr(stats, key) == pytest.approx(value, rel=1e-9, abs=1e-12), key
    assert np.array_equal(stats.log_histogram, reference_histogram(values))


def test_an_all_nan_tensor_has_nan_statistics_and_an_empty_histogram():
    stats = stats_of(torch.full((100,), float("nan")))
    assert stats.nonfinite_count == 100
    assert math.isnan(stats.mean) and math.isnan(stats.l2_norm)
    assert stats.log_histogram.sum() == 0


def test_fp32_histogram_is_exact_at_the_bin_edges_and_for_zeros_and_subnormals():
    edges = np.asarray(LOG_HISTOGRAM_EDGES, dtype=np.float32)
    below = np.nextafter(edges, np.float32(0))
    above = np.nextafter(edges, np.float32(np.inf))
    tiny = np.array([1e-40, -1e-44, 1e-13, 0.0, -0.0, 3e38, -3e38], dtype=np.float32)
    values = np.concatenate([edges, -below, above, tiny])
    stats = stats_of(torch.from_numpy(values))
    assert np.array_equal(stats.log_histogram, reference_histogram(values))
    assert stats.log_histogram[0] == 2  # the two zeros, and nothing else
    # Underflow: 1e-40, 1e-44 (subnormals), 1e-13 and the float just below the first edge.
    assert stats.log_histogram[1] == 4
    assert stats.log_histogram[-1] == 4  # the last edge, the float above it, and ±3e38
    assert stats.zero_fraction == 2 / values.size


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_results_do_not_depend_on_chunk_size_or_worker_count(dtype):
    generator = torch.Generator().manual_seed(2)
    tensor = (torch.randn(300_007, generator=generator) * 0.3 + 0.1).to(dtype)
    tensor[12345] = float("nan")
    results = [
        stats_of(tensor, chunk_elements=chunk, workers=workers)
        for chunk, workers in ((1 << 20, 1), (4096, 1), (1000, 3), (65536, 2))
    ]
    first = results[0]
    for other in results[1:]:
        assert np.array_equal(other.log_histogram, first.log_histogram)
        assert other.nonfinite_count == first.nonfinite_count == 1
        for key in ("l2_norm", "rms", "mean", "std", "min", "max", "excess_kurtosis"):
            if dtype in (torch.bfloat16, torch.float16):  # counts per bit pattern: exact
                assert getattr(other, key) == getattr(first, key), key
            else:
                assert getattr(other, key) == pytest.approx(getattr(first, key), rel=1e-12), key


def test_kl_is_zero_for_identical_histograms_and_grows_with_a_shift():
    generator = torch.Generator().manual_seed(3)
    weights = torch.randn(100_000, generator=generator) * 0.02
    same = stats_of(weights).log_histogram
    shifted = stats_of(weights * 10).log_histogram  # four quarter-decade bins to the right
    nudged = stats_of(weights * 1.05).log_histogram
    assert histogram_kl(same, same.copy()) == 0.0
    assert math.isfinite(histogram_kl(shifted, same))  # empty bins are smoothed, not infinite
    assert histogram_kl(shifted, same) > 1.0
    assert 0 < histogram_kl(nudged, same) < histogram_kl(shifted, same)
    assert math.isnan(histogram_kl(np.zeros(LOG_HISTOGRAM_BINS, dtype=np.int64), same))
