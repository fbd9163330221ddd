"""Weight deltas and Adam-state norms against float64 data of extreme magnitude (red-team round 6).

The per-tensor statistics were made exact for float64 of any magnitude (test_hostile_round6_stats),
but the sums of squares behind ‖W_t − W_prev‖, the update ratio, ‖m‖, ‖v‖ and the update RMS were
still unscaled: weights of 1e200 overflowed them (delta_norm NaN, unknown) and subnormal weights
underflowed them to 0, so a subnormal tensor that did change read ‖ΔW‖ = 0 and the
frozen_parameters rule called it frozen. Every path is checked: the raw safetensors bytes
(compiled kernels and the numpy fallback), the torch path (.pt checkpoints, fp32 masters) and a
run through tscope.analyze.

The references are exact (fractions) or correctly rounded (math.hypot), never the float64 sums
under test.
"""

from __future__ import annotations

import json
import math
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import torch

import tscope
from tests.test_hostile_round6_stats import safetensors_bytes
from tscope.ingest.checkpoints.safetensors_header import read_header
from tscope.ingest.checkpoints.stats import array_kernels, weight_deltas
from tscope.ingest.checkpoints.stats.adam import adam_stats
from tscope.ingest.checkpoints.stats.chunk_runner import ChunkRunner
from tscope.ingest.checkpoints.stats.safetensors_deltas import raw_delta_sums
from tscope.ingest.checkpoints.stats.safetensors_scan import READ_BYTES
from tscope.ingest.checkpoints.stats.weight_deltas import WeightDelta, delta_from_sums, weight_delta

STEPS = 100  # steps between the two checkpoints
TINY = 2.0**-1074  # the smallest subnormal: one ulp of every subnormal
_RNG = np.random.default_rng(61)
_NORMAL = _RNG.standard_normal(64)
_COUNTS = _RNG.integers(1, 4000, 64).astype(np.float64)  # subnormals as multiples of TINY

# (previous, current) weights of one F64 tensor.
CASES: dict[str, tuple[list[float], list[float]]] = {
    # Squares of 1e200 overflow float64: the sums were inf, delta_norm NaN.
    "huge": (list(_NORMAL * 1e200), list(_NORMAL * 1e200 * (1 + 1e-3 * _RNG.standard_normal(64)))),
    # Every weight moved by one ulp: squares of ~1e-320 underflow to 0, delta_norm read 0.
    "subnormal_one_ulp": (list(_COUNTS * TINY), list((_COUNTS + 1) * TINY)),
    # One huge weight that stays, one subnormal weight that moves: ‖ΔW‖ is that one ulp.
    "huge_still_tiny_moves": ([1e300, -3e-310, 2.0], [1e300, -3e-310 + TINY, 2.0]),
    # A difference past float64's range (3e308): the norm is inf, the ratio 2 per window.
    "difference_overflows": ([1.5e308, 1.0, -7.0], [-1.5e308, 1.0, -7.0]),
}


def _root(value: Fraction) -> float:
    """√value of an exact non-negative rational, correctly rounded within float64's range."""
    if value == 0:
        return 0.0
    half = (value.numerator.bit_length() - value.denominator.bit_length()) // 2
    try:
        return math.ldexp(math.sqrt(float(value / Fraction(2) ** (2 * half))), half)
    except OverflowError:
        return math.inf


def reference(previous: list[float], current: list[float]) -> dict[str, float]:
    """Exact delta norm, update ratio and growth rate of one window of STEPS steps."""
    delta_sq = sum((Fraction(a) - Fraction(b)) ** 2 for a, b in zip(current, previous, strict=True))
    current_sq = sum(Fraction(a) ** 2 for a in current)
    previous_sq = sum(Fraction(b) ** 2 for b in previous)
    growth = math.expm1(math.log(_root(current_sq / previous_sq)) / STEPS)
    return {
        "delta_norm": _root(delta_sq),
        "update_ratio_per_step": _root(delta_sq / previous_sq) / STEPS,
        "norm_growth_rate": growth,
    }


def assert_delta(delta: WeightDelta, previous: list[float], current: list[float]) -> None:
    for field, expected in reference(previous, current).items():
        got = getattr(delta, field)
        assert got == pytest.approx(expected, rel=1e-9, abs=0.0), field


def write_pair(folder: Path, previous: list[float], current: list[float]) -> tuple[Path, Path]:
    paths = []
    for name, values in (("previous", previous), ("current", current)):
        path = folder / f"{name}.safetensors"
        raw = np.asarray(values, dtype="<f8").tobytes()
        path.write_bytes(safetensors_bytes({"w": ("F64", [len(values)], raw)}))
        paths.append(path)
    return paths[0], paths[1]


def raw_delta(folder: Path, previous: list[float], current: list[float]) -> WeightDelta:
    before, after = write_pair(folder, previous, current)
    entries = [(path, read_header(path, path.name).entries[0]) for path in (after, before)]
    sums = raw_delta_sums(entries[0], entries[1], "x", workers=2)
    return delta_from_sums(*sums, STEPS, "weights_fp64")


@pytest.mark.parametrize("case", sorted(CASES))
def test_raw_float64_delta_is_exact_at_any_magnitude(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, case: str
) -> None:
    previous, current = CASES[case]
    assert_delta(raw_delta(tmp_path, previous, current), previous, current)
    # Without numba (the optional `fast` extra) the numpy kernels run: the same answers.
    monkeypatch.setattr(array_kernels, "delta_chunk_kernel", array_kernels._delta_chunk_np)
    monkeypatch.setattr(weight_deltas, "_scaled_squares", weight_deltas._scaled_squares_np)
    assert_delta(raw_delta(tmp_path, previous, current), previous, current)


@pytest.mark.parametrize("case", sorted(CASES))
def test_torch_float64_delta_is_exact_at_any_magnitude(case: str) -> None:
    """The torch path: tensors of .pt checkpoints (and fp32 master weights)."""
    previous, current = CASES[case]
    with ChunkRunner() as runner:
        delta = weight_delta(
            torch.tensor(current, dtype=torch.float64),
            torch.tensor(previous, dtype=torch.float64),
            STEPS,
            "weights_fp64",
            runner,
        )
    assert_delta(delta, previous, current)


def torch_delta(current: np.ndarray, previous: np.ndarray) -> WeightDelta:
    with ChunkRunner() as runner:
        return weight_delta(
            torch.from_numpy(current), torch.from_numpy(previous), STEPS, "w", runner
        )


def test_float64_delta_across_chunks_of_different_scales(tmp_path: Path) -> None:
    """Several read chunks (raw) and runner chunks (torch): ordinary, ×1e250 and ×1e-315
    stretches, each moved by a relative 1e-3, merged across their scales; chunks whose plain
    sums are each finite but overflow together; and the fast path's own values unchanged."""
    count = 3 * READ_BYTES // 8 + 5
    rng = np.random.default_rng(62)
    previous = rng.standard_normal(count)
    previous[count // 3 : 2 * count // 3] *= 1e250
    previous[2 * count // 3 :] *= 1e-315
    current = previous * (1 + 1e-3 * rng.standard_normal(count))
    expected = math.hypot(*(current - previous))  # correctly rounded, whatever the magnitudes
    before = math.hypot(*previous)
    delta = raw_delta(tmp_path, list(previous), list(current))
    assert delta.delta_norm == pytest.approx(expected, rel=1e-9, abs=0.0)
    assert delta.update_ratio_per_step == pytest.approx(
        expected / before / STEPS, rel=1e-9, abs=0.0
    )
    moved = torch_delta(current, previous)
    assert moved.delta_norm == pytest.approx(expected, rel=1e-9, abs=0.0)
    assert moved.update_ratio_per_step == pytest.approx(
        expected / before / STEPS, rel=1e-9, abs=0.0
    )
    # Each chunk's plain sums are finite (3e151² · 131072 ≈ 1.2e308) and trusted; their total is
    # not: added at a carried exponent, not as inf.
    previous = np.full(count, 3e151)
    current = previous * (1.01 + 1e-3 * rng.standard_normal(count))
    expected, before = math.hypot(*(current - previous)), math.hypot(*previous)
    for delta in (
        raw_delta(tmp_path, list(previous), list(current)),
        torch_delta(current, previous),
    ):
        assert delta.delta_norm == pytest.approx(expected, rel=1e-9, abs=0.0)
        ratio = expected / before / STEPS
        assert delta.update_ratio_per_step == pytest.approx(ratio, rel=1e-9, abs=0.0)
        growth = math.expm1(math.log(math.hypot(*current) / before) / STEPS)
        assert delta.norm_growth_rate == pytest.approx(growth, rel=1e-9, abs=0.0)
    # The fast path keeps its values: an ordinary window, a frozen tensor (exactly 0), plain sums.
    values = list(_NORMAL)
    frozen = raw_delta(tmp_path, values, values)
    assert (frozen.delta_norm, frozen.update_ratio_per_step, frozen.norm_growth_rate) == (0, 0, 0)
    assert raw_delta(tmp_path, [0.0, 1.0], [-0.0, 1.0]).delta_norm == 0.0  # bits differ, ΔW not
    shifted = [v + 1e-3 for v in values]
    assert_delta(raw_delta(tmp_path, values, shifted), values, shifted)
    plain = delta_from_sums(4.0, 9.0, 16.0, 2, "w")
    assert (plain.delta_norm, plain.update_ratio_per_step) == (2.0, 0.25)
    assert plain.norm_growth_rate == math.sqrt(0.75) - 1.0


def test_subnormal_tensor_that_changed_is_not_frozen(tmp_path: Path) -> None:
    """The reproducer: a Trainer-style F64 run in which every tensor trains, one of them holding
    subnormal weights that move by one ulp per window. It read ‖ΔW‖ = 0 and was reported frozen."""
    run = tmp_path / "run"
    rng = np.random.default_rng(63)
    names = [f"model.layers.{i}.mlp.weight" for i in range(3)] + ["model.layers.1.norm.weight"]
    weights = {name: rng.standard_normal(64) for name in names[:3]}
    weights[names[3]] = _COUNTS * TINY
    for index, step in enumerate((100, 200, 300)):
        folder = run / f"checkpoint-{step}"
        folder.mkdir(parents=True)
        tensors = {}
        for name, base in weights.items():
            values = (_COUNTS + index) * TINY if name == names[3] else base * (1 + 1e-2 * index)
            tensors[name] = ("F64", [8, 8], np.asarray(values, "<f8").tobytes())
        (folder / "model.safetensors").write_bytes(safetensors_bytes(tensors))
    lines = (json.dumps({"step": i, "loss": 3 * math.exp(-i / 80) + 0.3}) for i in range(301))
    (run / "metrics.jsonl").write_text("\n".join(lines) + "\n")
    case = tscope.analyze(run)
    table = case.layers_table
    tiny = table[(table["tensor"] == names[3]) & (table["step"] > 100)]
    assert list(tiny["delta_norm"]) == [math.hypot(*[TINY] * 64)] * 2  # 8 · 2**-1074, exact
    frozen = [f for f in case.findings if f.category == "frozen_parameters"]
    assert not frozen, [f.message for f in frozen]


# ---- Adam state --------------------------------------------------------------------------


def _exact_norm(values: np.ndarray) -> float:
    return _root(sum(Fraction(float(v)) ** 2 for v in values))


ADAM_CASES: dict[str, tuple[float, float]] = {
    # (scale of exp_avg, scale of exp_avg_sq): m² and v² underflow to 0, the update squared too
    # (m̂ / ε ≈ 1e-162); then m² and v² overflow, and the update (m̂ / √v̂ ≈ 1e200) squared.
    "subnormal": (1e-170, 1e-318),
    "huge": (1e250, 1e100),
}


@pytest.mark.parametrize("case", sorted(ADAM_CASES))
def test_float64_adam_state_norms_are_right_at_any_magnitude(case: str) -> None:
    m_scale, v_scale = ADAM_CASES[case]
    rng = np.random.default_rng(64)
    exp_avg = rng.standard_normal(300) * m_scale
    exp_avg_sq = rng.uniform(0.5, 2.0, 300) * v_scale
    step, eps, betas = 10.0, 1e-8, (0.9, 0.999)
    group = {"eps": eps, "betas": betas}
    state = {"exp_avg": torch.from_numpy(exp_avg), "exp_avg_sq": torch.from_numpy(exp_avg_sq)}
    with ChunkRunner() as runner:
        stats = adam_stats({**state, "step": step}, group, runner)
    correction1, correction2 = 1 - betas[0] ** step, 1 - betas[1] ** step
    update = exp_avg / correction1 / (np.sqrt(exp_avg_sq / correction2) + eps)
    assert stats.exp_avg_norm == pytest.approx(_exact_norm(exp_avg), rel=1e-9, abs=0.0)
    assert stats.exp_avg_sq_norm == pytest.approx(_exact_norm(exp_avg_sq), rel=1e-9, abs=0.0)
    rms = _exact_norm(update) / math.sqrt(update.size)
    assert stats.update_rms == pytest.approx(rms, rel=1e-9, abs=0.0)
