"""Why a replay does not reproduce the log: likely reasons as data (stable codes) for analyzers.

The first replayed step depends only on the restored weights and its batch; later steps also on
the optimizer state, the learning rate and the RNG; and any rounding difference grows where the
run is unstable. The reasons are ordered by how directly the evidence points at them: what the
first step shows (other data, another loss normaliser), then what the replay measured (a learning
rate off the log; random numbers drawn from an RNG state the checkpoint lacks), then what it had
to assume (the learning rate held at the checkpoint's value when neither the log nor the entry
gives the schedule; optimizer moments not restored), then rounding. An RNG state that was not
restored is no reason at all when the replayed steps drew no random number (no dropout, batches
that do not draw): the generators' states are compared before and after the replayed steps.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tscope.model.replay import (
    SKIPPED,
    MismatchReason,
    ReplayStep,
    StepComparison,
)

# Relative tolerance the loss-normaliser check uses (the bar for "reproduced", fidelity.py).
NORMALISER_MATCH_REL = 1e-5
# A first-step loss off by more than this is other data, not rounding: a batch shifted by one step
# or another corpus moves the fixture losses by 4e-2, while another device or torch build keeps
# them within 3e-7 in stable stretches (an H200 with torch 2.11 vs the CPU that made them).
DATA_MISMATCH_REL = 1e-3
# Logged learning rates farther apart than this (relative) mean the replay used another schedule;
# a float32 log alone is off by < 6e-8.
LR_MISMATCH_REL = 1e-6


@dataclass(frozen=True)
class ReplayConditions:
    """How the replay ran, for the likely reasons behind a mismatch."""

    optimizer_restored: bool
    rng_restored: bool
    deterministic: bool
    device_type: str
    producer_device: str | None  # "cpu", "cuda", ... when the checkpoint says
    lr_source: str
    producer_software: str | None = None  # e.g. "transformers 5.24.0", from the checkpoint
    replay_software: str | None = None  # the same library as installed for the replay
    # Whether the replayed steps drew from the global RNGs (their states differ after the
    # steps); None when not measured.
    rng_consumed: bool | None = None
    dropout: float | None = None  # the model's largest dropout probability, when known


def likely_reasons(
    comparisons: Sequence[StepComparison],
    first_mismatch_step: int | None,
    conditions: ReplayConditions,
    steps: Sequence[ReplayStep],
) -> list[MismatchReason]:
    """Most likely first."""
    if not comparisons or all(c.status == SKIPPED for c in comparisons):
        note = "the log has no loss for the replayed steps, so nothing could be compared"
        return [MismatchReason("no_logged_steps", note)]
    reasons: list[MismatchReason] = []
    by_step = {s.step: s for s in steps}
    first_bad = next((c for c in comparisons if c.step == first_mismatch_step), None)
    first_step = steps[0].step if steps else None
    at_first_step = first_bad is not None and first_bad.window[0] == first_step
    if first_bad is not None and _normaliser_explains(first_bad, by_step):
        reasons.append(
            MismatchReason(
                "loss_normaliser",
                f"at step {first_bad.step} the loss under the other Trainer token count "
                "(labels vs labels[..., 1:]) matches the log: the producer's transformers used "
                "the other convention; set trainer_counts_shifted_labels in the entry file",
            )
        )
    elif first_bad is not None and at_first_step and _far(first_bad):
        reasons.append(
            MismatchReason(
                "data_order",
                f"the first replayed step ({first_step}) already differs by "
                f"{_shown(first_bad.rel_diff)}; it depends only on the restored weights and its "
                "batch, so batches() likely yields other data or order than the run consumed "
                "(or the model or loss differ)",
            )
        )
    reasons.extend(_state_reasons(comparisons, conditions))
    reasons.extend(_numeric_reasons(comparisons, first_bad, at_first_step, conditions))
    window = max((c.window[1] - c.window[0] + 1 for c in comparisons), default=1)
    if window > 1:
        reasons.append(
            MismatchReason(
                "logging_window",
                f"logged losses are means over {window} steps: one step's difference is "
                "diluted and cannot be placed exactly",
            )
        )
    return reasons


def _state_reasons(
    comparisons: Sequence[StepComparison], conditions: ReplayConditions
) -> list[MismatchReason]:
    """Measured reasons first (a logged LR that differs, random draws from an unrestored RNG),
    then assumed ones (the LR held constant, optimizer moments missing)."""
    reasons = []
    lr_off = [
        c.step
        for c in comparisons
        if c.learning_rate_rel_diff is not None and c.learning_rate_rel_diff > LR_MISMATCH_REL
    ]
    if lr_off:
        reasons.append(
            MismatchReason(
                "learning_rate",
                f"the replay's learning rate differs from the logged one from step {lr_off[0]} "
                f"(source: {conditions.lr_source})",
            )
        )
    rng_reason = _rng_reason(conditions)
    if rng_reason is not None and conditions.rng_consumed:
        reasons.append(rng_reason)
    if conditions.lr_source == "constant" and not lr_off:
        reasons.append(
            MismatchReason(
                "learning_rate",
                "the learning rate was held at the checkpoint's value: the log has no learning "
                "rate for the replayed steps and the entry file defines no learning_rate(step); "
                "under a schedule (warmup, decay) every replayed update used another rate — "
                "define learning_rate(step) in the entry",
            )
        )
    if not conditions.optimizer_restored:
        reasons.append(
            MismatchReason(
                "optimizer_state_not_restored",
                "the optimizer's moments were not restored; if the run kept them, its updates "
                "differ from the replay's",
            )
        )
    if rng_reason is not None and conditions.rng_consumed is None:
        reasons.append(rng_reason)
    return reasons


def _rng_reason(conditions: ReplayConditions) -> MismatchReason | None:
    """None when the RNG was restored or the replayed steps drew no random number."""
    if conditions.rng_restored or conditions.rng_consumed is False:
        return None
    if conditions.dropout:
        what = f"dropout masks (p = {conditions.dropout:g})"
    elif conditions.dropout == 0.0:
        what = "the random numbers the entry's batches or the model draw (the model has no dropout)"
    else:
        what = "dropout masks and any random batch or augmentation"
    drew = "the replayed steps drew random numbers, but " if conditions.rng_consumed else ""
    return MismatchReason(
        "rng_state_missing",
        f"{drew}no RNG state was restored: {what} differ from the run's — save the RNG state "
        "with the checkpoints, or rebuild the run's RNG stream in the entry",
    )


def _numeric_reasons(
    comparisons: Sequence[StepComparison],
    first_bad: StepComparison | None,
    at_first_step: bool,
    conditions: ReplayConditions,
) -> list[MismatchReason]:
    reasons = []
    if not conditions.deterministic:
        reasons.append(
            MismatchReason(
                "nondeterministic_settings",
                "the replay ran without deterministic settings: kernel choice and thread count "
                "change float sums",
            )
        )
    if conditions.producer_device and conditions.producer_device != conditions.device_type:
        reasons.append(
            MismatchReason(
                "different_kernels",
                f"the run trained on {conditions.producer_device}, the replay on "
                f"{conditions.device_type}: other kernels round differently (~1e-7 a step)",
            )
        )
    producer, mine = conditions.producer_software, conditions.replay_software
    if producer and mine and producer != mine:
        reasons.append(
            MismatchReason(
                "software_versions",
                f"the run used {producer}, the replay {mine}: other library versions can "
                "compute the same step differently",
            )
        )
    if first_bad is not None and at_first_step and not _far(first_bad):
        reasons.append(
            MismatchReason(
                "first_step_rounding",
                f"the first replayed step differs by only {_shown(first_bad.rel_diff)}: "
                "rounding (device, kernels, library versions), not other data",
            )
        )
    if first_bad is not None and not at_first_step:
        matched = [c.step for c in comparisons if c.step < first_bad.step and c.status != SKIPPED]
        if matched:
            reasons.append(
                MismatchReason(
                    "numerical_drift",
                    f"steps {matched[0]}-{matched[-1]} reproduce, then the replay drifts from "
                    f"step {first_bad.step}: small differences grow fast where the run is "
                    "unstable (a large learning rate, a diverging loss)",
                )
            )
    return reasons


def _far(comparison: StepComparison) -> bool:
    """Off by more than rounding explains (or finite on one side only)."""
    return comparison.rel_diff is None or comparison.rel_diff > DATA_MISMATCH_REL


def _shown(rel_diff: float | None) -> str:
    return "a non-finite value" if rel_diff is None else f"{rel_diff:.2g} relative"


def _normaliser_explains(comparison: StepComparison, by_step: dict[int, ReplayStep]) -> bool:
    replayed = by_step.get(comparison.step)
    if (
        replayed is None
        or replayed.alternative_loss is None
        or comparison.window[0] != comparison.step
    ):
        return False
    logged = comparison.logged_loss
    return abs(replayed.alternative_loss - logged) <= NORMALISER_MATCH_REL * abs(logged)
