"""loss_plateau: the loss does not move from the start of the log over a long window.

Judged from where the log starts: any run that trains falls fast at first (a fresh model within
its first tenth; a fine-tune within its first epoch), so a loss that stays at its starting level
for half of the logged steps is not learning. A loss that fell and then flattened (a converged
fine-tune, the end of a cosine schedule) is never a plateau here: the window must start at the
first logged point.
"""

from __future__ import annotations

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.baseline import MAD_TO_SIGMA, rolling_median
from tscope.analyzers.signals import finite_loss_series, fmt
from tscope.analyzers.training_kind import training_kind
from tscope.model import Finding, Run
from tscope.model.categories import Category
from tscope.model.metric_names import GRAD_NORM, LEARNING_RATE

# The level is a rolling median over this fraction of the logged points (at least
# SMOOTHING_MIN_POINTS), so single noisy points neither start nor end a plateau.
SMOOTHING_FRACTION = 0.05
SMOOTHING_MIN_POINTS = 5
# "Does not move": the smoothed level stays within this band below its starting level — the
# larger of 1% of the level and a noise band. Noise argument: the median of w points with
# per-point σ has standard error SE ≈ 1.2533·σ/√w; the start's median and the lowest of the
# n/w windows after it differ by noise alone by about √2·√(2·ln(n/w)) SE (the expected minimum
# of n/w independent normals), so the band adds 2 SE of margin to that: a drop beyond it is
# learning, not noise (with n/w = 20 windows: 6.3 SE).
PLATEAU_MIN_RELATIVE_DROP = 0.01
NOISE_MARGIN_STANDARD_ERRORS = 2.0
MEDIAN_STANDARD_ERROR = 1.2533  # √(π/2): standard error of a median over that of a mean
# Measured (tests/planted_logs.py, scripts/measure_rules.py): false alarms (warnings) on 0 of 83 healthy
# runs (fixtures, stable sweep, shared/realdata without the Megatron incident logs) and 0/10 dev,
# 0/20 held-out seeds on each control (healthy, converged fine-tune, slow −6% pre-training).
# Recall 10/10 dev and 20/20 held-out on LR 1e-9, on a frozen model and on a run stuck for its
# first 60%. (A first version with a fixed 3-SE band scored 9/10, 9/10, 5/10 dev and 17/20 on each
# held-out set: the noise band above replaced it, so the held-out seeds were seen once before.)
# "A long window": the flat stretch from the first point spans at least half of the logged steps
# and this many points (so a short log is "insufficient data", not a plateau).
PLATEAU_MIN_FRACTION = 0.5
# A stretch whose least-squares trend falls this many standard errors below zero (and by the 1%
# floor above) is learning, however the window medians compare (`_falling`). The standard error
# assumes independent points; autocorrelated noise (sequential data) wanders further, so the
# margin is large: a stuck run's line has a slope of 0 ± 1 standard error.
TREND_STANDARD_ERRORS = 5.0
PLATEAU_MIN_POINTS = 50
# A log whose first step is beyond this fraction of its last starts mid-run (a resume, a later
# W&B segment): the run may have converged before it, so a flat loss there is context (info).
# pythia 70m's segment 67001–143000 moves 0.3% — flat, and healthy.
MID_RUN_START_FRACTION = 0.10
# Reasons the message names when the logs show them.
# A loss that fell by half or more in its first logged points (max of the first EARLY_POINTS ≥
# EARLY_FALL_RATIO × the start window's median) did move: a diffusion model's noise-prediction
# loss falls 1.11 → 0.37 in its first points and then improves by a few percent over thousands
# of steps (healthy-run hunt, session 26: "did not move from step 0" was a warning). A run that
# is not learning at all starts flat; one stuck after a first fall (a classifier at its class
# prior falls ~1.2×) stays a warning.
EARLY_POINTS = 3
EARLY_FALL_RATIO = 1.5
# A run that starts from a trained model (training_kind.py: a fine-tune, an adapter, preference
# optimization) may already fit its data: its loss can stay within the noise for the whole log,
# and with the LR and the gradients both logged and flowing that is context, not a stuck run. A
# blind set's healthy short fine-tune (session 27: 1.86 -> ~1.7 over 300 noisy steps, LR 3e-4,
# gradients flowing) warned "did not move". A fine-tune whose LR or gradients are near zero, or
# that logs neither, keeps the warning: nothing shows it learns.
PRETRAINED_KINDS = frozenset({"fine_tune", "lora", "preference"})
LR_NEAR_ZERO = 1e-7  # below every LR in use for training LMs (DOMAIN.md B.7: 3e-4 … 3e-1 sweep)
GRAD_NORM_NEAR_ZERO = 1e-6  # a gradient this small moves no weight under any LR in use


class PlateauExplainer:
    name = "plateau"
    categories: tuple[str, ...] = ("loss_plateau",)
    defines = (
        Category(
            "loss_plateau",
            "symptom",
            "warning",
            "logs",
            "a loss that does not move (not learning)",
            "the loss does not move from the first logged point for half of the log",
            standalone=True,
            symptom_order=90,
        ),
    )

    def run(self, evidence: Evidence) -> list[Finding]:
        run = evidence.run
        series = finite_loss_series(run)
        if series is None:
            return []
        _, steps, values = series
        n = values.size
        if n < PLATEAU_MIN_POINTS:
            return []
        window = max(SMOOTHING_MIN_POINTS, int(SMOOTHING_FRACTION * n))
        start_level = float(np.median(values[:window]))
        sigma = MAD_TO_SIGMA * float(
            np.median(np.abs(np.diff(values) - np.median(np.diff(values))))
        )
        sigma /= np.sqrt(2.0)  # differences of two points carry √2 × the per-point noise
        band = max(PLATEAU_MIN_RELATIVE_DROP * abs(start_level), noise_band(sigma, window, n))
        level = rolling_median(values, window, window)
        moved = np.flatnonzero(level < start_level - band)
        flat_until = int(moved[0]) - window + 1 if moved.size else n - 1  # last flat point
        flat_until = max(flat_until, 0)
        first, last = int(steps[0]), int(steps[-1])
        flat_steps = int(steps[flat_until]) - first
        if flat_until + 1 < PLATEAU_MIN_POINTS or flat_steps < PLATEAU_MIN_FRACTION * (
            last - first
        ):
            return []
        if _falling(values[: flat_until + 1], start_level):
            return []
        return [_finding(evidence, steps, values, flat_until, start_level, band, first, last)]


def _falling(values: np.ndarray, start_level: float) -> bool:
    """Whether the loss falls across the "flat" stretch after all: its least-squares line drops by
    at least PLATEAU_MIN_RELATIVE_DROP of the start level over the stretch, at a slope
    TREND_STANDARD_ERRORS standard errors below zero (σ from the residuals' MAD, so a heavy-tailed
    batch does not hide the trend). The window medians compare a few points at a time; on a short
    noisy log (50–120 points, 5–8% noise) a loss falling 10.8 → 9.2 stayed inside their band while
    its slope was 7 standard errors below zero (bench/synthetic_logs.py, seeds 1,500–2,999: 3 of
    1,500 healthy logs warned)."""
    # Both tests scale with the values: compared in units of the largest one, a finite value
    # near float's limit (1e308) cannot overflow the sums into inf and NaN.
    scale = float(np.max(np.abs(values))) if values.size else 0.0
    if scale > 0 and np.isfinite(scale):
        values, start_level = values / scale, start_level / scale
    n = values.size
    x = np.arange(n, dtype=float)
    x -= x.mean()
    slope = float(np.dot(x, values - values.mean()) / np.dot(x, x))
    residual = values - values.mean() - slope * x
    sigma = MAD_TO_SIGMA * float(np.median(np.abs(residual - np.median(residual))))
    standard_error = sigma / float(np.sqrt(np.dot(x, x)))
    decline = -slope * (n - 1)
    return (
        decline >= PLATEAU_MIN_RELATIVE_DROP * abs(start_level)
        and slope < -TREND_STANDARD_ERRORS * standard_error
    )


def noise_band(sigma: float, window: int, n: int) -> float:
    """How far below the start's median the lowest later median falls by noise alone (+margin)."""
    standard_error = MEDIAN_STANDARD_ERROR * sigma / np.sqrt(window)
    windows = max(n / window, 2.0)
    return float(
        np.sqrt(2.0)
        * (np.sqrt(2.0 * np.log(windows)) + NOISE_MARGIN_STANDARD_ERRORS)
        * standard_error
    )


def _finding(
    evidence: Evidence,
    steps: np.ndarray,
    values: np.ndarray,
    flat_until: int,
    start_level: float,
    band: float,
    first: int,
    last: int,
) -> Finding:
    run = evidence.run
    mid_run = first > MID_RUN_START_FRACTION * last
    opening = float(np.max(values[:EARLY_POINTS]))
    fell_first = start_level > 0 and opening >= EARLY_FALL_RATIO * start_level
    end_step = int(steps[flat_until])
    whole = flat_until == values.size - 1
    reasons = likely_reasons(run, first, end_step)
    kind = training_kind(run, evidence.checkpoints)
    settled_fine_tune = (
        kind is not None
        and kind.kind in PRETRAINED_KINDS
        and not reasons
        and run.has(LEARNING_RATE)
        and run.has(GRAD_NORM)
    )
    span = "for the whole log" if whole else f"until step {end_step}, then it began to fall"
    likely = "Likely: " + "; ".join(reasons) + "." if reasons else ""
    if fell_first:
        message = (
            f"After falling from {fmt(opening)} in its first logged points, the loss stayed "
            f"within {fmt(band)} of {fmt(start_level)} {span} ({flat_until + 1} logged points): "
            "it converged early and improves slowly, unless the eval metrics stalled too. " + likely
        )
    else:
        message = (
            f"The loss did not move from step {first} {span}: its smoothed level stayed within "
            f"{fmt(band)} of the starting {fmt(start_level)} over {flat_until + 1} logged "
            "points. " + likely
        )
    if mid_run:
        message += (
            f" The log starts at step {first}: if the run had converged before, this is expected."
        )
    if settled_fine_tune and kind is not None:
        message += (
            f" The run starts from a trained model ({'; '.join(kind.reasons)}) and its LR and "
            "gradients flow: a model already fit to this data stays near its level, unless the "
            "eval metrics stalled too."
        )
    quiet = mid_run or (fell_first and not reasons) or settled_fine_tune
    return Finding(
        category="loss_plateau",
        severity="info" if quiet else "warning",
        confidence=0.35 if quiet else (0.7 if reasons else 0.55),
        step=first,
        layer=None,
        message=message.strip(),
        evidence={
            "start_level": start_level,
            "band": band,
            "flat_until_step": end_step,
            "flat_points": flat_until + 1,
            "log_starts_mid_run": mid_run,
            "fell_first_from": opening if fell_first else None,
            "pretrained_start": settled_fine_tune,
        },
        suggestion=(
            "Check, in this order: the learning rate actually applied (scheduler, optimizer param "
            "groups), parameters left frozen (requires_grad, a LoRA adapter not attached), "
            "gradients not flowing (a detached loss, zero grad norm), and the data loader "
            "repeating one batch."
        ),
        threshold=(
            f"smoothed loss within max({PLATEAU_MIN_RELATIVE_DROP:.0%}, the noise band of a "
            "median) of its start for ≥ "
            f"{PLATEAU_MIN_FRACTION:.0%} of the logged steps from the first point"
        ),
    )


def likely_reasons(run: Run, first_step: int, last_step: int) -> list[str]:
    """The reasons the logs over the flat stretch point to (empty when they show none)."""
    reasons = []
    if run.has(LEARNING_RATE):
        steps, lrs = run.series(LEARNING_RATE)
        lrs = lrs[(steps >= first_step) & (steps <= last_step) & np.isfinite(lrs)]
        if lrs.size and float(np.max(np.abs(lrs))) < LR_NEAR_ZERO:
            reasons.append(f"the learning rate is far too low (at most {fmt(float(lrs.max()))})")
    if run.has(GRAD_NORM):
        steps, grads = run.series(GRAD_NORM)
        grads = grads[(steps >= first_step) & (steps <= last_step) & np.isfinite(grads)]
        if grads.size and float(np.median(grads)) < GRAD_NORM_NEAR_ZERO:
            reasons.append(
                f"gradients are not flowing (median grad norm {fmt(float(np.median(grads)))}): "
                "frozen parameters or a detached loss"
            )
    return reasons
