"""The torch-free safetensors scan gives the torch path's statistics (within float64 rounding).

Files are written by the real producer (safetensors.torch.save_file); the reference is
tscope.ingest.checkpoints.stats.tensor.tensor_stats over the tensors torch loads back.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from safetensors.torch import load_file, save_file

from tscope.errors import UnreadableInput
from tscope.ingest.checkpoints.stats import array_kernels, safetensors_scan
from tscope.ingest.checkpoints.stats.safetensors_scan import scan_safetensors
from tscope.ingest.checkpoints.stats.tensor import TensorStats, tensor_stats

FLOAT_FIELDS = ("l2_norm", "rms", "mean", "std", "min", "max", "max_abs", "zero_fraction",
                "excess_kurtosis")  # fmt: skip


def _tensors() -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(7)
    big = 0.02 * torch.randn(300_000, generator=generator)  # several spans at the test's size
    spiky = big.clone()
    spiky[::997] = 0.0
    spiky[5] = 40.0
    with_nan = torch.randn(50_000, generator=generator)
    with_nan[[3, 70, 4_000]] = torch.tensor([math.nan, math.inf, -math.inf])
    tensors = {
        "embed.weight": (big + 0.001).reshape(600, 500).to(torch.bfloat16),
        "mlp.weight": spiky.reshape(500, 600),
        "mlp.bias": torch.zeros(600),
        "norm.weight": (1 + 0.05 * torch.randn(64, generator=generator)).to(torch.bfloat16),
        "attn.half": with_nan.to(torch.float16),
        "attn.nan32": with_nan,
        "head.fp64": torch.randn(20_000, generator=generator, dtype=torch.float64) * 1e-3,
        "tiny.fp16": torch.tensor([0.5, -2.0, 0.0], dtype=torch.float16),
        "empty": torch.zeros(0),
        "scalar": torch.tensor(3.0),
    }
    for layer in range(40):  # many small tensors side by side (several per span)
        tensors[f"layers.{layer}.ln"] = torch.randn(257, generator=generator).to(torch.bfloat16)
    return tensors


def _assert_close(scanned: TensorStats, reference: TensorStats, name: str) -> None:
    assert scanned.dtype == reference.dtype, name
    assert (scanned.numel, scanned.nonfinite_count) == (reference.numel, reference.nonfinite_count)
    for field in FLOAT_FIELDS:
        got, want = getattr(scanned, field), getattr(reference, field)
        if math.isnan(want):
            assert math.isnan(got), (name, field)
        else:
            assert got == pytest.approx(want, rel=1e-9, abs=1e-12), (name, field)
    np.testing.assert_array_equal(scanned.log_histogram, reference.log_histogram, err_msg=name)


@pytest.mark.parametrize("mapped", [True, False])
@pytest.mark.parametrize("workers", [1, 3])
def test_scan_equals_the_torch_path_for_every_tensor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, workers: int, mapped: bool
) -> None:
    monkeypatch.setattr(safetensors_scan, "SPAN_BYTES", 64 << 10)  # many spans per tensor
    monkeypatch.setattr(safetensors_scan, "READ_BYTES", 16 << 10)  # several reads per span
    monkeypatch.setattr(safetensors_scan, "MAP_LARGE_SPANS", mapped)  # mmap'd spans, or reads
    path = tmp_path / "model.safetensors"
    save_file(_tensors(), str(path))
    reference = {name: tensor_stats(t) for name, t in load_file(str(path)).items()}
    scanned = dict(scan_safetensors(path, "model.safetensors", workers=workers))
    assert scanned.keys() == reference.keys()
    for name, stats in scanned.items():
        _assert_close(stats, reference[name], name)


def test_the_scan_does_not_depend_on_the_span_size(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "model.safetensors"
    save_file(_tensors(), str(path))
    whole = dict(scan_safetensors(path, "model.safetensors", workers=2))
    monkeypatch.setattr(safetensors_scan, "SPAN_BYTES", 4 << 10)
    monkeypatch.setattr(safetensors_scan, "READ_BYTES", 1 << 10)
    cut = dict(scan_safetensors(path, "model.safetensors", workers=2))
    for name, stats in whole.items():
        _assert_close(cut[name], stats, name)


def test_a_file_cut_short_is_refused_with_its_name(tmp_path: Path) -> None:
    path = tmp_path / "model.safetensors"
    save_file({"w": torch.randn(10_000)}, str(path))
    path.write_bytes(path.read_bytes()[:-100])
    with pytest.raises(UnreadableInput, match=r"model\.safetensors"):
        list(scan_safetensors(path, "model.safetensors"))


def test_numpy_fallback_kernels_match_the_loops_numba_compiles() -> None:
    """Without the `fast` extra the numpy kernels run: same summaries as the reference loops."""
    values = (np.random.default_rng(3).standard_normal(10_001) * 0.02).astype(np.float32)
    values[[0, 9]] = [np.nan, 0.0]
    results = []
    for kernel in (array_kernels._float_chunk_py, array_kernels._float_chunk_np):
        summary = np.zeros(array_kernels.SUMMARY_FIELDS)
        patterns = np.zeros(array_kernels.MAGNITUDE_PATTERNS, dtype=np.int64)
        kernel(values, values.view(np.uint32), patterns, summary)
        results.append((summary, patterns))
    np.testing.assert_allclose(results[0][0], results[1][0], rtol=1e-9)
    np.testing.assert_array_equal(results[0][1], results[1][1])
    bits = values.view(np.uint32)[:5000].astype(np.uint16)
    counts = [np.zeros(1 << 16, dtype=np.int64) for _ in range(2)]
    array_kernels._count_patterns_py(bits, counts[0])
    array_kernels._count_patterns_np(bits, counts[1])
    np.testing.assert_array_equal(counts[0], counts[1])


def _in_order_min_max(values: np.ndarray[Any, Any]) -> tuple[float, float]:
    """The plain loop the kernel must agree with: ties between -0.0 and +0.0 keep the first."""
    low = high = float(values[0])
    for value in values.tolist():
        low = value if value < low else low
        high = value if value > high else high
    return low, high


@pytest.mark.parametrize(
    "arrangement",
    [
        [0.0, -0.0, 1.0],  # min is zero: the first zero met is +0.0
        [-0.0, 0.0, 1.0],
        [2.0, -0.0, 0.0, 3.0],
        [-1.0, 0.0, -0.0],  # max is zero
        [-1.0, -0.0, 0.0],
        [-0.0, 0.0, -0.0],  # all zeros
        [0.0, -0.0],
        [-2.5, 7.0, 1e-45, -1e-45],  # subnormal extremes of either sign
        [3.4e38, -3.4e38],
    ],
)
def test_the_kernel_takes_min_and_max_as_the_in_order_loop_does_signed_zeros_included(
    arrangement: list[float],
) -> None:
    """The fp32 kernel takes min/max from integer keys of the bits (vectorized), where -0.0 sorts
    below +0.0: the chunk's first zero must still be the one reported, as the plain loop does."""
    values = np.asarray(arrangement * 300, dtype=np.float32)  # long enough for vector lanes
    summary = array_kernels.empty_summary()
    magnitudes = np.zeros(array_kernels.MAGNITUDE_PATTERNS, dtype=np.int64)
    array_kernels.float_chunk_kernel(values, values.view(np.uint32), magnitudes, summary)
    low, high = _in_order_min_max(values)
    got = (summary[array_kernels.LOW], summary[array_kernels.HIGH])
    assert [math.copysign(1.0, v) for v in got] == [
        math.copysign(1.0, low),
        math.copysign(1.0, high),
    ]
    assert got == (low, high)


class _TorchOnly:
    """The same handle with raw_location hidden: collect_layers takes the torch path."""

    def __init__(self, handle: Any) -> None:
        self._handle = handle
        self.info, self.partial = handle.info, handle.partial

    def __getattr__(self, name: str) -> Any:
        if name == "raw_location":
            raise AttributeError(name)
        return getattr(self._handle, name)


def test_layers_from_the_scan_equal_the_torch_path_including_deltas(tmp_path: Path) -> None:
    from tscope.ingest.checkpoints.base import LoadOptions
    from tscope.ingest.checkpoints.hf_trainer import HfTrainerReader
    from tscope.ingest.checkpoints.stats.layers import collect_layers

    generator = torch.Generator().manual_seed(11)
    base = {
        "wte.weight": 0.02 * torch.randn(3000, 64, generator=generator),
        "h.0.mlp.weight": 0.02 * torch.randn(256, 256, generator=generator),
        "ln_f.weight": 1 + 0.01 * torch.randn(64, generator=generator),
    }
    folders = []
    for step, scale in ((100, 0.0), (200, 1e-3)):
        folder = tmp_path / f"checkpoint-{step}"
        folder.mkdir()
        moved = {n: t + scale * torch.randn(t.shape, generator=generator) for n, t in base.items()}
        moved["wte.weight"] = moved["wte.weight"].to(torch.bfloat16)  # mixed dtypes, as in AMP
        save_file(moved, str(folder / "model.safetensors"))
        folders.append(folder)

    def opened() -> list[Any]:
        return [HfTrainerReader().open(f, f.name, LoadOptions()) for f in folders]

    scanned = collect_layers(opened(), workers=2)
    reference = collect_layers([_TorchOnly(h) for h in opened()], workers=2)
    assert hasattr(opened()[0], "raw_location")
    assert list(scanned["tensor"]) == list(reference["tensor"])
    numeric = [c for c in reference.columns if reference[c].dtype.kind == "f"]
    for column in numeric:
        np.testing.assert_allclose(
            scanned[column].to_numpy(), reference[column].to_numpy(), rtol=1e-9, atol=1e-15,
            err_msg=column,
        )  # fmt: skip
    assert scanned["delta_norm"].notna().sum() == 3  # the second checkpoint's three deltas
    for got, want in zip(scanned["log_histogram"], reference["log_histogram"], strict=True):
        np.testing.assert_array_equal(got, want)


@pytest.mark.skipif(not array_kernels.HAVE_NUMBA, reason="the batched kernel needs the fast extra")
def test_small_tensors_batched_per_span_equal_one_call_per_tensor(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    generator = torch.Generator().manual_seed(5)
    small = {f"h.{i}.w": 0.02 * torch.randn(3 + i % 50, generator=generator) for i in range(300)}
    small["h.7.w"][1] = math.nan  # a non-finite tensor among them
    small["h.9.w"][:] = 0.0
    path = tmp_path / "model.safetensors"
    save_file(small, str(path))
    batched = dict(scan_safetensors(path, "model.safetensors", workers=2))
    monkeypatch.setattr(array_kernels, "segments_kernel", None)
    one_by_one = dict(scan_safetensors(path, "model.safetensors", workers=2))
    assert batched.keys() == one_by_one.keys() == small.keys()
    for name, stats in batched.items():  # the same compiled loops: equal, not just close
        other = one_by_one[name]
        for field in FLOAT_FIELDS:
            got, want = getattr(stats, field), getattr(other, field)
            assert got == want or (math.isnan(got) and math.isnan(want)), (name, field)
        assert stats.nonfinite_count == other.nonfinite_count
        np.testing.assert_array_equal(stats.log_histogram, other.log_histogram)
