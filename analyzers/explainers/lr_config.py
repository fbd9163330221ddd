"""lr_too_low / lr_too_high from the configuration: the peak LR against the kind of training.

The kind (preference optimization, LoRA, from scratch, fine-tune) is inferred from what the run
left, each piece named in the evidence (analyzers/training_kind.py).

The peak LR is the largest logged LR, else the configured one. "Far" is a factor of
FAR_FACTOR outside the range the sources below use for that kind. A far LR alone is context
(`info`: a configuration choice); it is a `warning` when the curve agrees — for too low, the loss
does not move (the loss_plateau rule holds); for too high, the loss blew up (non-finite, a lasting
rise, or a spike it never recovered from) or, for a configured LR and a run from scratch, it
stalled early (warmup_stall.early_stall: a fast first drop, then no progress through the first
half of the run).
"""

from __future__ import annotations

import math
from dataclasses import replace
from typing import TYPE_CHECKING

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.divergence import loss_rise
from tscope.analyzers.explainers.plateau import PlateauExplainer
from tscope.analyzers.optimizer_family import adam_or_unknown
from tscope.analyzers.signals import fmt, loss_series, primary_loss
from tscope.analyzers.training_kind import (
    TrainingKind,
    Vocabulary,
    config_number,
    training_kind,
    vocabulary,
)
from tscope.model import Finding, Run
from tscope.model.categories import Category
from tscope.model.metric_names import LEARNING_RATE

if TYPE_CHECKING:
    from tscope.analyzers.explainers.warmup_stall import EarlyStall

# Declared here, where it is emitted; LearningRateExplainer (which runs this rule) lists it.
LR_TOO_LOW = Category(
    "lr_too_low",
    "context",
    "warning",
    "logs",
    "a learning rate too low for this kind of training",
    "the peak LR is ≥ 10× below the typical range for the kind of training",
    standalone=True,
)
# Typical peak LRs (AdamW) per kind of training, (low, high), with the sources:
TYPICAL_LR = {
    # LoRA (Hu et al. 2021, arXiv 2106.09685, App. D: GPT-2 M/L 2e-4, RoBERTa 4e-4–5e-4);
    # QLoRA (Dettmers et al. 2023, arXiv 2305.14314, App. B: 2e-4 up to 13B, 1e-4 for 33B/65B).
    "lora": (5e-5, 5e-4),
    # Full fine-tuning: Llama 2 SFT 2e-5 (Touvron et al. 2023, arXiv 2307.09288 §3.1); the
    # Trainer's default 5e-5 (transformers TrainingArguments.learning_rate); Whisper fine-tunes
    # at 1e-5 (shared/realdata whisper_large_v2_ja logs 1e-5).
    "full_fine_tune": (5e-6, 1e-4),
    # A fine-tune with no adapter found: LoRA or full, so the union of both ranges.
    "fine_tune": (5e-6, 5e-4),
    # Pre-training: GPT-3 Table 2.1 (arXiv 2005.14165) 6e-4 at 125M down to 0.6e-4 at 175B;
    # Llama 2 (§2.2) 3e-4 (7B/13B), 1.5e-4 (34B/70B). Small models train higher: the top is
    # raised to 1e-2 so that a 10M-parameter model at 3e-3 (the fixtures) is typical.
    "pre_training": (6e-5, 1e-2),
    # DPO: Zephyr 5e-7 (Tunstall et al. 2023, arXiv 2310.16944); TRL DPOConfig's default 1e-6.
    "preference": (1e-7, 5e-6),
}
KIND_WORDS = {
    "lora": "LoRA / adapter fine-tuning",
    "full_fine_tune": "full fine-tuning",
    "fine_tune": "fine-tuning (LoRA or full: no adapter config found)",
    "pre_training": "training from scratch (pre-training)",
    "preference": "preference optimization (DPO-style)",
}
# A from-scratch run still at ≥ this share of ln(vocab) at the end of its log has not learned even
# the token frequencies: a model that learns those gets to its data's unigram entropy, well under
# it (English bytes ~0.53 of ln 256 at 4.2 bits; GPT-2's BPE on web text ~7.5 nats, 0.69 of
# ln 50,257; Shakespeare's characters ~0.71 of ln 65). With the LR far below its range that
# agrees with it (a blind set's Trainer Llama at 3e-6: 5.54 -> 5.32 of ln 256 = 5.55 in 600
# steps, still falling, so "context"). Judged after UNTRAINED_MIN_STEPS logged steps: healthy
# runs pass their unigram level within the first hundred.
UNTRAINED_FRACTION = 0.9
UNTRAINED_MIN_STEPS = 200
# 10× outside the typical range: every source above stays within ×3 of its own range.
FAR_FACTOR = 10.0
LR_KEYS = ("learning_rate", "lr", "max_lr", "optimizer.lr", "optim.lr", "peak_lr")


def peak_lr(run: Run) -> tuple[float, str] | None:
    if run.has(LEARNING_RATE):
        _, lrs = run.series(LEARNING_RATE)
        lrs = lrs[np.isfinite(lrs)]
        if lrs.size and lrs.max() > 0:
            if still_warming_up(lrs):
                return float(lrs.max()), WARMUP_ONLY
            return float(lrs.max()), "the largest logged learning rate"
    configured = config_number(run, LR_KEYS)
    if configured is not None:
        return configured, CONFIGURED
    return None


CONFIGURED = "the configured learning rate"


# Said of a log whose LR still climbs at its end: a warm-up the log stops inside, or a ramp (a
# blind set's LR rising 200x from step 120, hR run13, session 31, was "inside the warm-up").
WARMUP_ONLY = "the largest logged learning rate, of a log whose LR still rises at its end"


MIN_LR_POINTS = 10


def still_warming_up(lrs: np.ndarray) -> bool:
    """The log ends inside the warm-up (its last point is its highest and above its first), or
    holds fewer than MIN_LR_POINTS LRs: the logged maximum is then a lower bound of the peak,
    never evidence that the peak is too low (the BLOOM-176B prequel excerpt logs one LR, 3.8e-6,
    at iteration 2 of a 6e-5 warm-up)."""
    if lrs.size < MIN_LR_POINTS:
        return True
    if not (lrs[-1] >= lrs.max() and lrs[-1] > lrs[0]):
        return False
    # ...and still rising at the end: a warm-up does not hold its top, a constant schedule after
    # its warm-up does (hQ run16, session 31: 0.05, then 0.1 for 47 points read as "a log that
    # ends inside the warm-up"). Held means longer than any step of the rise before it: an LR
    # logged once per micro-batch, printed to 2 digits or raised stepwise repeats values while
    # it still climbs.
    held = int(np.argmax(lrs[::-1] < lrs[-1]))  # points at the last value, at the end
    rise = lrs[: lrs.size - held]
    changes = np.flatnonzero(np.diff(rise) != 0)
    longest_step = int(np.diff(np.concatenate(([-1], changes, [rise.size - 1]))).max())
    return held < max(HELD_PEAK_POINTS, longest_step + 1)


# The fewest points a held top needs (one repeated point is a rounding, not a schedule).
HELD_PEAK_POINTS = 3


def lr_range_findings(evidence: Evidence, curve_too_high: list[Finding]) -> list[Finding]:
    """The lr_too_high findings (the curve's, with the range added when it applies) and the
    configuration's lr_too_low / lr_too_high."""
    run = evidence.run
    kind = training_kind(run, evidence.checkpoints)
    peak = peak_lr(run)
    if kind is None or peak is None or not adam_or_unknown(evidence):
        return curve_too_high  # the ranges are AdamW's (optimizer_family.py)
    lr, lr_source = peak
    low, high = TYPICAL_LR[kind.kind]
    context = {
        "training_kind": kind.kind,
        "kind_reasons": list(kind.reasons),
        "peak_lr": lr,
        "peak_lr_source": lr_source,
        "typical_low": low,
        "typical_high": high,
    }
    if lr > FAR_FACTOR * high:
        if curve_too_high:
            also = (
                f" The peak {fmt(lr)} is ×{fmt(lr / high)} the top of the typical range "
                f"{_range_text(kind)}."
            )
            return [
                replace(
                    f,
                    message=f.message + also,
                    evidence={**f.evidence, **context, "factor_above_range": lr / high},
                )
                for f in curve_too_high
            ]
        return [_too_high(run, kind, lr, lr_source, context, evidence)]
    if lr < low / FAR_FACTOR and lr_source != WARMUP_ONLY:
        return [*curve_too_high, _too_low(kind, lr, lr_source, context, evidence)]
    return curve_too_high


def _blew_up(evidence: Evidence) -> int | None:
    run = evidence.run
    loss = primary_loss(run)
    if loss is None:
        return None
    steps, values = loss_series(run, loss)
    candidates = [int(s) for s in steps[~np.isfinite(values)][:1]]
    rise = loss_rise(steps, values)
    if rise is not None:
        candidates.append(int(steps[rise[0]]))
    candidates += [s.onset_step for s in evidence.spikes_on(loss) if s.end_step is None]
    return min(candidates) if candidates else None


# "Rose through the log": the logged LR rose between two points over at least this share
# of its points (a warm-up is a few % of a run; this one is the run). Strictly: a constant LR
# raised by a persistent jump never falls either (holdout19's nanogpt-lr_jump_persistent-116
# read lr_too_high at a stall before its jump when equal points counted).
ROSE_THROUGH_SHARE = 0.9


def _rose_through_the_log(run: Run) -> bool:
    lrs = run.series(LEARNING_RATE)[1]
    lrs = lrs[np.isfinite(lrs)]
    if lrs.size < MIN_LR_POINTS:
        return False
    return bool(np.mean(np.diff(lrs) > 0) >= ROSE_THROUGH_SHARE and lrs[-1] >= lrs.max())


def at_peak_by(run: Run, step: int) -> bool:
    """The logged LR reached NEAR_PEAK of its largest value by `step`."""
    lr_steps, lrs = run.series(LEARNING_RATE)
    finite = np.isfinite(lrs)
    lr_steps, lrs = lr_steps[finite], lrs[finite]
    if lrs.size == 0 or lrs.max() <= 0:
        return False
    return bool(lr_steps[first_at_peak(lrs)] <= step)


def first_at_peak(lrs: np.ndarray) -> int:
    """The index of the first LR at NEAR_PEAK of the largest (`lrs` finite, not empty)."""
    return int(np.argmax(lrs >= NEAR_PEAK * lrs.max()))


# "At its peak": within 1% of the largest logged LR (a schedule's float noise, a printed LR's
# rounding), for the stall rules here, in warmup_stall.py and in peak_stall.py.
NEAR_PEAK = 0.99


def _stalled(evidence: Evidence, kind: TrainingKind) -> EarlyStall | None:
    """The early stall of a run trained from scratch and logged from its start (a hot LR with a
    warm-up the log does not show: a blind set's nanoGPT log at 0.3, session 30, printed the LR
    only in its config echo and sat at the unigram level for the whole run)."""
    # Imported here: warmup_stall reads this module's TYPICAL_LR.
    from tscope.analyzers.explainers.warmup_stall import (
        MIN_POINTS,
        early_stall,
        finite_loss_from_start,
    )

    loss = primary_loss(evidence.run)
    if kind.kind != "pre_training" or loss is None:
        return None
    logged = finite_loss_from_start(evidence, loss, MIN_POINTS)
    return None if logged is None else early_stall(evidence, *logged)


def _range_text(kind: TrainingKind) -> str:
    low, high = TYPICAL_LR[kind.kind]
    return f"{fmt(low)}–{fmt(high)} for {KIND_WORDS[kind.kind]} ({'; '.join(kind.reasons)})"


def _too_high(
    run: Run,
    kind: TrainingKind,
    lr: float,
    lr_source: str,
    context: dict[str, object],
    evidence: Evidence,
) -> Finding:
    blew_up = _blew_up(evidence)
    # The stall agrees with an LR that held through it: a configured one (it holds from the
    # start), or a logged one at its peak by the stall (below). A logged peak may come from a
    # later jump (the benchmark's persistent LR jumps raise it past the range long after a stall
    # at a typical LR: two nanoGPT runs were headlined lr_too_high at 14-16 for a jump at 64-76).
    # A logged LR that rose through the whole log (a warm-up that never ends, or a ramp with no
    # peak before it: two blind sets' runs, hN run10 and hP run10, sessions 29-30, climbed
    # linearly to 13x and 30x their intended peak while the loss stalled) has no later jump
    # to stall before, and no peak for warmup_stall or peak_stall to read.
    rose_through = lr_source == WARMUP_ONLY and _rose_through_the_log(run)
    holds_from_start = lr_source == CONFIGURED or rose_through
    if rose_through:
        lr_source = "the largest logged learning rate, reached at the end of a log it rose through"
    stall = _stalled(evidence, kind) if blew_up is None else None
    # A logged LR at its peak before the loss stopped falling was at it through the stall: no
    # later jump raised it (warmup_stall.py leaves such a far-too-high LR to this rule).
    if stall is not None and not (holds_from_start or at_peak_by(run, stall.stall_step)):
        stall = None
    factor = lr / TYPICAL_LR[kind.kind][1]
    agrees = blew_up is not None or stall is not None
    if blew_up is not None:
        curve = f"; the loss blew up at step {blew_up}."
    elif stall is not None:
        curve = (
            f"; the loss fell from {stall.first_text} to {fmt(stall.early_min)} by step "
            f"{stall.stall_step} and then stalled: its median went from {fmt(stall.after_drop)} "
            f"to {fmt(stall.at_half)} by step {stall.end_step}, half the run. A model trained "
            "from scratch at a typical LR keeps falling through its first half; at this one its "
            "steps are too large to make progress."
        )
    else:
        curve = "; the loss curve shows no harm from it, so this is context, not a cause."
    return Finding(
        category="lr_too_high",
        severity="warning" if agrees else "info",
        confidence=0.7 if blew_up is not None else 0.6 if agrees else 0.4,
        step=blew_up if blew_up is not None else stall.stall_step if stall is not None else None,
        layer=None,
        message=(
            f"The peak learning rate {fmt(lr)} ({lr_source}) is ×{fmt(factor)} the top of the "
            f"typical range {_range_text(kind)}" + curve
        ),
        evidence={
            **context,
            "factor_above_range": factor,
            "loss_blew_up_at": blew_up,
            "loss_stalled_at": stall.stall_step if stall is not None else None,
        },
        suggestion=(
            "Lower the peak learning rate into the typical range (or check its units: 2e-3 "
            "where 2e-4 was meant), and restart from a checkpoint before the blow-up."
            if blew_up is not None
            else "Lower the peak learning rate into the typical range (or check its units) and "
            "restart from the beginning: the stall set in within the first steps."
            if agrees
            else "If this LR is intended (a sweep, an optimizer other than AdamW), nothing to do."
        ),
        threshold=f"peak LR > {FAR_FACTOR:g}× the top of the kind's typical range",
    )


def _too_low(
    kind: TrainingKind, lr: float, lr_source: str, context: dict[str, object], evidence: Evidence
) -> Finding:
    plateau = PlateauExplainer().run(evidence)
    untrained = _still_untrained(evidence) if kind.kind == "pre_training" else None
    agrees = bool(plateau) or untrained is not None
    factor = TYPICAL_LR[kind.kind][0] / lr
    if plateau:
        curve = "; the loss does not move (loss_plateau)."
    elif untrained is not None:
        level, vocab, span = untrained
        curve = (
            f"; after {span} steps the loss is still {fmt(level)}, "
            f"{level / math.log(vocab.size):.0%} of ln(vocab {vocab.size}) = "
            f"{fmt(math.log(vocab.size))}: the level of a model that has not learned even the "
            "token frequencies."
        )
    else:
        curve = "; the loss still falls, so this is context, not a cause."
    step = plateau[0].step if plateau else (evidence.run.first_step if agrees else None)
    return Finding(
        category="lr_too_low",
        severity="warning" if agrees else "info",
        confidence=0.7 if agrees else 0.4,
        step=step,
        layer=None,
        message=(
            f"The peak learning rate {fmt(lr)} ({lr_source}) is ×{fmt(factor)} below the bottom "
            f"of the typical range {_range_text(kind)}" + curve
        ),
        evidence={
            **context,
            "factor_below_range": factor,
            "loss_plateau": bool(plateau),
            "still_untrained": untrained is not None,
        },
        suggestion=(
            "Raise the learning rate into the typical range (check its units and the schedule's "
            "multiplier) and check that the parameters meant to train receive gradients."
            if agrees
            else "If the run trains slower than expected, try a learning rate in the typical range."
        ),
        threshold=f"peak LR < 1/{FAR_FACTOR:g} of the bottom of the kind's typical range",
    )


def _still_untrained(evidence: Evidence) -> tuple[float, Vocabulary, int] | None:
    """(the loss over the log's last tenth, the vocabulary, the steps logged) when a from-scratch run
    ends at or above UNTRAINED_FRACTION of ln(vocab) after UNTRAINED_MIN_STEPS; else None."""
    run = evidence.run
    vocab = vocabulary(run, evidence.checkpoints)
    loss = primary_loss(run)
    if vocab is None or loss is None:
        return None
    steps, values = loss_series(run, loss)
    finite = np.isfinite(values)
    steps, values = steps[finite], values[finite]
    if steps.size < 10 or steps[-1] - steps[0] < UNTRAINED_MIN_STEPS:
        return None
    level = float(np.median(values[-max(steps.size // 10, 3) :]))
    ceiling = math.log(vocab.size)
    if level < UNTRAINED_FRACTION * ceiling:
        return None
    return level, vocab, int(steps[-1] - steps[0])
