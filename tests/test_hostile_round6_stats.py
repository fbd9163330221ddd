"""Checkpoint statistics against hostile float data (red-team round 6).

* A signaling NaN (F32 0x7F800001, BF16 0xFF81, F16 0x7C01, F64 0x7FF0000000000001) made numpy
  print `RuntimeWarning: invalid value encountered in cast` when a tensor was widened: the
  project promises no numpy warnings on stderr, and a NaN is only a non-finite count.
* F64 sums of squares were not scaled: ±1e200 gave an l2_norm, rms and std of inf, subnormal
  tensors an l2_norm and rms of 0 next to a max_abs of 5e-324. Every statistic of finite float64
  data must be right, whatever its magnitude.

The references are exact or correctly rounded (math.hypot, math.fsum, fractions), never the
float64 sums under test.
"""

from __future__ import annotations

import json
import math
import struct
import warnings
from fractions import Fraction
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch

import tscope
from tscope.ingest.checkpoints.safetensors_header import read_header
from tscope.ingest.checkpoints.stats import array_kernels
from tscope.ingest.checkpoints.stats.safetensors_deltas import raw_delta_sums
from tscope.ingest.checkpoints.stats.safetensors_scan import READ_BYTES, scan_safetensors
from tscope.ingest.checkpoints.stats.tensor import TensorStats, tensor_stats

# One signaling NaN per dtype: exponent all ones, quiet bit clear, payload 1 (F16's ~0x7C01 is
# 0xFC01 with the sign). (code, numpy storage dtype, bit pattern, numpy value dtype)
SNANS: dict[str, tuple[str, int, str]] = {
    "F16": ("<u2", 0x7C01, "<f2"),
    "BF16": ("<u2", 0xFF81, ""),
    "F32": ("<u4", 0x7F800001, "<f4"),
    "F64": ("<u8", 0x7FF0000000000001, "<f8"),
}
# Sizes: a small tensor (the widened histogram path), one that takes the pattern / magnitude
# tables (>= SMALL_TENSOR_ELEMENTS) and one past READ_BYTES (mapped spans, several chunks).
SIZES = (64, 20_000, READ_BYTES // 2 + 3)


def safetensors_bytes(tensors: dict[str, tuple[str, list[int], bytes]]) -> bytes:
    """A safetensors file written by hand, so any bit pattern (a signaling NaN) goes in as is."""
    header: dict[str, Any] = {}
    blobs, offset = [], 0
    for name, (code, shape, raw) in tensors.items():
        header[name] = {"dtype": code, "shape": shape, "data_offsets": [offset, offset + len(raw)]}
        blobs.append(raw)
        offset += len(raw)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(blobs)


def snan_bytes(code: str, count: int, finite: float = 0.5) -> bytes:
    """`count` elements of `code`: every other one a signaling NaN, the rest `finite`."""
    storage, pattern, _ = SNANS[code]
    bits = np.zeros(count, dtype=storage)
    if code == "BF16":
        good = np.array([finite], np.float32).view(np.uint32)[0] >> 16
    else:
        good = np.array([finite], SNANS[code][2]).view(storage)[0]
    bits[:] = good
    bits[::2] = pattern
    return bits.tobytes()


def scan(
    tmp_path: Path, tensors: dict[str, tuple[str, list[int], bytes]], name: str = "model"
) -> dict[str, Any]:
    path = tmp_path / f"{name}.safetensors"
    path.write_bytes(safetensors_bytes(tensors))
    return dict(scan_safetensors(path, "model.safetensors", workers=2))


def test_signaling_nans_are_counted_without_a_numpy_warning(tmp_path: Path) -> None:
    """Every dtype and every path of the scan (one file per dtype and size)."""
    for code in sorted(SNANS):
        for count in SIZES:
            tensors = {"w": (code, [count], snan_bytes(code, count))}
            # Two small tensors side by side: one compiled call for the span (segments kernel).
            tensors.update({f"s{i}": (code, [8], snan_bytes(code, 8)) for i in range(2)})
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                stats = scan(tmp_path, tensors, f"{code}_{count}")
            for name, numel in (("w", count), ("s0", 8), ("s1", 8)):
                assert stats[name].nonfinite_count == (numel + 1) // 2, (code, count, name)
                assert stats[name].max_abs == 0.5
                assert stats[name].l2_norm == pytest.approx(0.5 * math.sqrt(numel // 2), rel=1e-12)


_TORCH = {"F16": torch.float16, "BF16": torch.bfloat16, "F32": torch.float32, "F64": torch.float64}


@pytest.mark.parametrize("code", sorted(SNANS))
def test_signaling_nans_in_weight_deltas_and_fallback_kernels_stay_quiet(
    tmp_path: Path, code: str
) -> None:
    """The numpy fallback kernels (no numba), the raw delta sums and the torch path (tensors of
    .pt checkpoints) widen the same bytes."""
    raw = snan_bytes(code, 64)
    for name in ("a", "b"):
        (tmp_path / f"{name}.safetensors").write_bytes(safetensors_bytes({"w": (code, [64], raw)}))
    entries = {n: read_header(tmp_path / f"{n}.safetensors", n).entries[0] for n in ("a", "b")}
    if code == "BF16":
        values: Any = array_kernels.widen_bf16(np.frombuffer(raw, "<u2"))
    else:
        values = np.frombuffer(raw, SNANS[code][2])
        values = values.astype(np.float32) if code == "F16" else values
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        summary = array_kernels.empty_summary()
        array_kernels._float_chunk_np(
            values, np.zeros(0, np.uint32), np.zeros(1, np.int64), summary
        )
        array_kernels._delta_chunk_np(values, values, np.zeros(3))
        raw_delta_sums(
            (tmp_path / "a.safetensors", entries["a"]),
            (tmp_path / "b.safetensors", entries["b"]),
            "x",
        )
        signed = np.frombuffer(snan_bytes(code, 40_000), SNANS[code][0].replace("u", "i"))
        torch_stats = tensor_stats(torch.from_numpy(signed.copy()).view(_TORCH[code]))
    assert summary[array_kernels.NONFINITE] == 32
    assert summary[array_kernels.COUNT] == 32
    assert torch_stats.nonfinite_count == 20_000
    assert torch_stats.max_abs == 0.5


def test_signaling_nan_checkpoint_through_analyze_is_quiet(tmp_path: Path) -> None:
    """The reproducer: a Trainer-style run whose second checkpoint is all signaling NaNs."""
    run = tmp_path / "run"
    good = np.random.default_rng(0).standard_normal(64).astype(np.float32)
    snan = np.full(64, 0x7F800001, np.uint32).view(np.float32)
    for step, array in ((100, good), (200, snan)):
        folder = run / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        (folder / "model.safetensors").write_bytes(
            safetensors_bytes({"layers.0.weight": ("F32", [8, 8], array.tobytes())})
        )
    lines = (json.dumps({"step": i, "loss": 3 * math.exp(-i / 80) + 0.3}) for i in range(301))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        case = tscope.analyze(run)
    table = case.layers_table.set_index("step")
    assert table.loc[200, "nonfinite_count"] == 64
    assert table.loc[100, "max_abs"] == float(np.abs(good).max())


# ---- F64 magnitudes --------------------------------------------------------------------------


def reference(values: list[float]) -> dict[str, float]:
    """Correctly rounded statistics: exact rationals for the moments, hypot for the norm."""
    n = len(values)
    exact = [Fraction(v) for v in values]
    mean = sum(exact) / n
    m2 = sum((x - mean) ** 2 for x in exact)
    m4 = sum((x - mean) ** 4 for x in exact)
    return {
        "l2_norm": math.hypot(*values),
        "rms": math.hypot(*values) / math.sqrt(n),
        "mean": float(mean),
        "std": _root(m2 / n),
        "excess_kurtosis": float(n * m4 / (m2 * m2)) - 3.0 if m2 else math.nan,
        "max_abs": max(abs(v) for v in values),
    }


def _root(value: Fraction) -> float:
    """√value of a rational that may lie outside float64's range before the root (1e-640)."""
    if value == 0:
        return 0.0
    half = (value.numerator.bit_length() - value.denominator.bit_length()) // 2
    return math.ldexp(math.sqrt(float(value / Fraction(2) ** (2 * half))), half)


def assert_matches(stats: TensorStats, values: list[float]) -> None:
    for field, expected in reference(values).items():
        got = getattr(stats, field)
        if math.isnan(expected):
            assert math.isnan(got), field
        else:
            assert got == pytest.approx(expected, rel=1e-9, abs=0.0), field


F64_CASES: dict[str, list[float]] = {
    "huge_pm": [1e200, -1e200] * 8,
    "subnormal": [5e-324] * 16,
    "subnormal_mixed": [5e-324, 1.5e-320, -2.2e-310, 0.0] * 4,
    "near_max": [1.2e308, -1.2e308, 1e307, 3.0],  # l2_norm 1.7e308: still a float64
    "huge_and_tiny": [1e300, 1e-300, -3e299, 0.0, 7.0],
    "kurtosis_overflow": [1e100, 2e100, -5e99, 3e100, 0.0],
    "wide_spread": [float(v) for v in np.random.default_rng(6).standard_normal(50) * 1e160],
}


@pytest.mark.parametrize("case", sorted(F64_CASES))
def test_float64_statistics_are_right_at_any_magnitude(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    values = F64_CASES[case]
    tensors = {"w": ("F64", [len(values)], np.asarray(values, dtype="<f8").tobytes())}
    assert_matches(scan(tmp_path, tensors)["w"], values)
    assert_matches(tensor_stats(torch.tensor(values, dtype=torch.float64)), values)
    # Without numba (the optional `fast` extra) the numpy kernels run: the same answers.
    monkeypatch.setattr(array_kernels, "float_chunk_kernel", array_kernels._float_chunk_np)
    monkeypatch.setattr(array_kernels, "segments_kernel", None)
    assert_matches(scan(tmp_path, tensors)["w"], values)


def test_float64_large_tensor_mixing_scales_across_chunks(tmp_path: Path) -> None:
    """Mapped spans of a large tensor: ordinary chunks merged with 1e250 and subnormal ones."""
    rng = np.random.default_rng(7)
    count = 3 * READ_BYTES // 8
    values = rng.standard_normal(count)
    values[count // 3 : 2 * count // 3] *= 1e250
    values[2 * count // 3 :] *= 1e-315
    stats = scan(tmp_path, {"w": ("F64", [count], values.tobytes())})["w"]
    scaled = values.astype(np.longdouble) / np.longdouble(1e250)
    norm = float(np.sqrt(np.sum(scaled * scaled))) * 1e250
    assert stats.l2_norm == pytest.approx(norm, rel=1e-9)
    assert stats.rms == pytest.approx(norm / math.sqrt(count), rel=1e-9)
    assert stats.std == pytest.approx(float(np.std(scaled)) * 1e250, rel=1e-9)
    torch_stats = tensor_stats(torch.from_numpy(values))
    assert torch_stats.l2_norm == pytest.approx(norm, rel=1e-9)
    assert torch_stats.std == pytest.approx(stats.std, rel=1e-9)
