"""lr_ramp (analyzers/explainers/lr_ramp.py): an LR climbing past its warm-up's peak.

The schedules come from their real producers: torch's and transformers' schedulers stepping a real
optimizer (the legitimate shapes that rise again after the warm-up must stay silent), and the
benchmark's nanoGPT-style loop (bench/accuracy/produce_nanogpt.py) trained here with an LR ramp
planted, a triangular cyclic schedule and cosine with hard restarts (whose restarts are LR jumps
back to the warm-up's peak: learning_rate.py reports them as info, not warnings).
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from tscope.analyzers.explainers.lr_ramp_shape import RAMP_MIN_FACTOR, lr_ramp

torch = pytest.importorskip("torch")

ACCURACY_DIR = Path(__file__).resolve().parents[1] / "bench" / "accuracy"
if str(ACCURACY_DIR) not in sys.path:
    sys.path.insert(0, str(ACCURACY_DIR))

STEPS = 200


def _stepped(make: Callable[[Any], Any], steps: int = STEPS) -> tuple[np.ndarray, np.ndarray]:
    """The LR a real scheduler gives a real optimizer, logged after each optimizer step (as the
    Trainer logs it)."""
    parameter = torch.nn.Parameter(torch.zeros(1))
    optimizer = torch.optim.AdamW([parameter], lr=1e-3)
    scheduler = make(optimizer)
    lrs = []
    for _ in range(steps):
        optimizer.step()
        scheduler.step()
        lrs.append(optimizer.param_groups[0]["lr"])
    return np.arange(1, steps + 1), np.array(lrs)


def _legitimate_schedules() -> dict[str, Callable[[Any], Any]]:
    transformers = pytest.importorskip("transformers")
    sched = torch.optim.lr_scheduler
    return {
        "cosine_with_hard_restarts": lambda o: (
            transformers.get_cosine_with_hard_restarts_schedule_with_warmup(o, 20, STEPS, 4)
        ),
        "inverse_sqrt": lambda o: transformers.get_inverse_sqrt_schedule(o, 20),
        "wsd": lambda o: transformers.get_wsd_schedule(o, 20, 40, num_stable_steps=120),
        "polynomial": lambda o: transformers.get_polynomial_decay_schedule_with_warmup(
            o, 20, STEPS, power=2.0
        ),
        "cyclic_triangular": lambda o: sched.CyclicLR(
            o, base_lr=1e-4, max_lr=1e-3, step_size_up=15, cycle_momentum=False
        ),
        "cosine_warm_restarts": lambda o: sched.CosineAnnealingWarmRestarts(o, T_0=30, T_mult=2),
        "one_cycle": lambda o: sched.OneCycleLR(o, max_lr=1e-3, total_steps=STEPS + 1),
        # A resumed run whose scheduler was rebuilt: warm-up and cosine again from step 100.
        "rewarm_after_resume": lambda o: sched.LambdaLR(
            o, lambda i: _warmup_cosine(i % 100, 10, 100) if i < 100 else _warmup_cosine(i, 10, 200)
        ),
    }


def _warmup_cosine(step: int, warmup: int, total: int) -> float:
    if step < warmup:
        return step / warmup
    return 0.5 * (1 + np.cos(np.pi * (step - warmup) / (total - warmup)))


def test_legitimate_rising_schedules_are_not_ramps() -> None:
    for name, make in _legitimate_schedules().items():
        steps, lrs = _stepped(make)
        assert lrs.max() > lrs.min() * 2, name  # the shape does move
        assert lr_ramp(steps, lrs) is None, name


def test_a_compounding_multiplier_is_a_ramp_from_its_first_raised_step() -> None:
    # The bug the benchmark plants: ×1.06 per step from optimizer step 80 on a cosine schedule
    # (LambdaLR counts from 0; the LR logged after step k is the one step k + 1 uses).
    def multiplier(i: int) -> float:
        step = i + 1
        base = _warmup_cosine(step - 1, 20, STEPS)
        return base * 1.06 ** (step - 80 + 1) if step >= 80 else base

    steps, lrs = _stepped(lambda o: torch.optim.lr_scheduler.LambdaLR(o, multiplier))
    ramp = lr_ramp(steps, lrs)
    assert ramp is not None
    assert ramp.start_step == 79  # the first logged LR above the low: the one step 80 uses
    assert ramp.peak_step == 20 and ramp.peak_lr == pytest.approx(1e-3)
    assert ramp.growth_per_step == pytest.approx(1.06 * 0.99, rel=0.02)
    assert lrs[steps == ramp.cross_step][0] > RAMP_MIN_FACTOR * ramp.peak_lr
    assert ramp.double_step is not None and lrs[steps == ramp.double_step][0] >= 2e-3


def test_a_jump_is_not_a_ramp() -> None:
    def jumped(i: int) -> float:
        return _warmup_cosine(i, 20, STEPS) * (20.0 if i >= 100 else 1.0)

    steps, lrs = _stepped(lambda o: torch.optim.lr_scheduler.LambdaLR(o, jumped))
    assert lr_ramp(steps, lrs) is None  # lr_schedule_jump's case


# --- runs trained by the benchmark's nanoGPT-style producer -------------------------------------


def _spec(cause: str, schedule: str, seed: int, plant: dict[str, Any] | None = None) -> Any:
    """A smoke-sized run (bench/accuracy/spec.py's SMOKE_SETTINGS), 70 steps at a gentler LR."""
    from smoke_runs import SMOKE_SETTINGS
    from spec import RunSpec

    settings = {**SMOKE_SETTINGS, "steps": 70, "peak_lr": 2e-3, "save_every": 35}
    settings["schedule"] = schedule
    return RunSpec(
        producer="nanogpt",
        index=95,
        seed=seed,
        model="nanogpt",
        cause=cause,
        plant=plant or {},
        **settings,
    )


@pytest.fixture(scope="module")
def nanogpt_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    import paths  # noqa: F401  (puts fixtures/ on sys.path)
    from generate import generate, run_folder
    from spec import CONTROL, LR_RAMP

    specs = {
        "ramp": _spec(LR_RAMP, "constant", 11, {"step": 35, "growth": 1.08}),
        "cyclic": _spec(CONTROL, "cyclic", 13),
        "restarts": _spec(CONTROL, "cosine_restarts", 15),
    }
    cache = tmp_path_factory.mktemp("lr-ramp-runs")
    assert generate(cache, list(specs.values()), jobs=1, verbose=False) == []
    return {name: run_folder(cache, spec) / "run" for name, spec in specs.items()}


def _findings(run: Path, category: str) -> list[Any]:
    from tscope.pipeline import analyze

    case = analyze(run, read_weights=False)
    return [f for f in case.findings if f.category == category]


def test_a_planted_ramp_is_found_at_its_first_step(nanogpt_runs: dict[str, Path]) -> None:
    (finding,) = _findings(nanogpt_runs["ramp"], "lr_ramp")
    # nanoGPT logs iter_num = optimizer step - 1: the ramp's first step 35 is logged as 34.
    assert finding.step == 34
    assert finding.severity == "warning"
    evidence = finding.evidence
    assert evidence["warmup_peak_step"] == 10
    assert evidence["growth_per_step"] == pytest.approx(1.08, rel=1e-3)  # on a constant LR
    assert evidence["passed_threshold_step"] < evidence["passed_double_step"]
    assert evidence["factor_over_peak"] > 2
    assert "ramped up past its warm-up peak" in finding.message


def test_cyclic_and_restart_schedules_trained_for_real_stay_silent(
    nanogpt_runs: dict[str, Path],
) -> None:
    for name in ("cyclic", "restarts"):
        assert _findings(nanogpt_runs[name], "lr_ramp") == [], name
        assert _findings(nanogpt_runs[name], "warmup_too_short") == [], name
    # The hard restarts jump back to the warm-up's peak in one interval: reported, as info.
    restarts = _findings(nanogpt_runs["restarts"], "lr_schedule_jump")
    assert len(restarts) == 2  # RESTART_CYCLES = 3 cycles: two restarts
    assert all(f.severity == "info" and "warm restarts" in f.message for f in restarts)
    assert all(f.evidence["returns_to_peak_step"] == 10 for f in restarts)  # the warm-up peak
