"""intervention_effect: what each what-if replay shows about the cause of the spike.

Reading the experiments together answers "data or state?":
- dropping the flagged samples (or skipping the spike batch) removes the spike → the data;
- the same batches from an earlier checkpoint still spike → the data, whatever the state
  (PaLM, Chowdhery et al. 2022 §5.1); they no longer spike → the state at this checkpoint;
- a smaller learning rate or clipping removes it → the optimization step size (the state and the
  settings), not one batch alone.
"""

from __future__ import annotations

from collections.abc import Sequence

from tscope.analyzers.replay.base import qualified
from tscope.analyzers.replay.interventions import KEPT_FRACTION, REMOVED_FRACTION
from tscope.analyzers.signals import fmt
from tscope.model import Finding
from tscope.model.categories import Category
from tscope.model.replay import InterventionOutcome, ReplayResult


def effect_findings(outcomes: Sequence[InterventionOutcome], qualified: bool) -> list[Finding]:
    """`qualified`: the baseline replay does not reproduce the log, so no what-if is evidence
    about the run: each finding says "not conclusive", at low confidence."""
    findings = []
    for outcome in outcomes:
        if outcome.spike_line is None or outcome.effect == "unjudged":
            continue  # too little history to tell a spike from the loss's own level
        fraction = outcome.removed_fraction
        if outcome.effect == "no_spike":
            reading = (
                "The baseline's peak stays under its own spike line: there is no spike in the "
                "replayed window for this what-if to remove."
            )
        else:
            reading = _reading(outcome)
        message = (
            f"What-if {_describe(outcome)}: the peak loss in the window goes from "
            f"{fmt(outcome.baseline_peak_loss)} (step {outcome.baseline_peak_step}) to "
            f"{fmt(outcome.peak_loss)} (step {outcome.peak_step}), removing "
            f"{_percent(fraction)} of the baseline's excess over its pre-spike level "
            f"{fmt(outcome.reference_median)}; the spike line is {fmt(outcome.spike_line)}. "
            f"{reading}"
        )
        if qualified:
            message = (
                f"Not conclusive: {message} The baseline replay does not reproduce the log, so "
                "this describes the replayed run, not the logged one."
            )
        findings.append(
            Finding(
                category="intervention_effect",
                severity="info",
                confidence=0.2 if qualified else 0.85,
                step=outcome.baseline_peak_step,
                layer=None,
                message=message,
                evidence={
                    "what_if": outcome.name,
                    **{key: value for key, value in outcome.params.items()},
                    "spike_removed": outcome.spike_removed and not qualified,
                    "effect": outcome.effect,
                    "removed_fraction": fraction,
                    "conclusive": not qualified,
                    "baseline_peak_loss": outcome.baseline_peak_loss,
                    "what_if_peak_loss": outcome.peak_loss,
                    "spike_line": outcome.spike_line,
                    "reference_median": outcome.reference_median,
                },
                suggestion=(
                    "Fix the entry file until the baseline replay reproduces the log, then rerun "
                    "the what-ifs."
                    if qualified
                    else _suggestion(outcome)
                ),
                source="replay",
                threshold=(
                    "spike line = median of the steps before the window + 6 robust σ; removed ≥ "
                    f"{REMOVED_FRACTION:.0%} of the excess over the pre-spike level, kept ≤ "
                    f"{KEPT_FRACTION:.0%}"
                ),
            )
        )
    return findings


def cause_verdict(outcomes: Sequence[InterventionOutcome]) -> str | None:
    """'data', 'state' or None, from the experiments that were run (None when any is not
    conclusive: a replay that does not reproduce the log says nothing about its cause)."""
    if any(not o.conclusive for o in outcomes):
        return None
    by_name = {o.name: o.effect for o in outcomes}
    skip, earlier = by_name.get("skip"), by_name.get("from")
    data = skip == "removed" or earlier == "kept"
    # A smaller step removing all of it while the batch's own update explains only part is the
    # state's: a persistent ×44 LR jump's first update (skipped) did 68% of the damage and the
    # raised LR the rest, where "kept" alone read "do not single out data or state".
    state = earlier == "removed" or (
        skip in ("kept", "partial")
        and any(by_name.get(name) == "removed" for name in ("lr", "clip"))
    )
    if data and not state:
        return "data"
    if state and not data:
        return "state"
    return None


def _percent(fraction: float | None) -> str:
    return "an unknown share" if fraction is None else f"{fraction:.0%}"


def _describe(outcome: InterventionOutcome) -> str:
    params = outcome.params
    if outcome.name == "lr":
        return f"learning rate ×{fmt(float(str(params.get('lr_factor'))))} over the window"
    if outcome.name == "clip":
        return f"gradient norm clipped at {fmt(float(str(params.get('max_grad_norm'))))}"
    if outcome.name == "from":
        return f"the window's batches fed to the state of checkpoint step {outcome.checkpoint_step}"
    if "samples" in params:
        samples = params["samples"]
        count = sum(len(rows) for rows in samples.values()) if isinstance(samples, dict) else 0
        return f"the {count} flagged samples dropped"
    return "the spike batch's update skipped"


def _reading(outcome: InterventionOutcome) -> str:
    if outcome.effect == "partial":
        return (
            "Part of the spike remains: this change explains some of it, not all (neither "
            "removed nor kept)."
        )
    removed = outcome.spike_removed
    if outcome.name == "skip":
        what = "these samples do" if "samples" in outcome.params else "this batch does"
        return (
            "The spike is gone: the data caused it."
            if removed
            else f"The spike remains: {what} not cause it alone."
        )
    if outcome.name == "from":
        return (
            "From the earlier state the same batches do not spike: the spike needs the state the "
            "run had (bad state, not bad data)."
            if removed
            else "From the earlier state the same batches spike too: the data is bad whatever "
            "the state."
        )
    if outcome.name == "lr":
        return (
            "The spike is gone: the step size drives it (the learning rate, not one batch alone)."
            if removed
            else "The spike remains at this learning rate: the step size alone does not drive it."
        )
    return (
        "The spike is gone: clipping would have contained it."
        if removed
        else "The spike remains: clipping at this threshold would not have contained it."
    )


def _suggestion(outcome: InterventionOutcome) -> str:
    if outcome.name == "skip" and outcome.spike_removed:
        return "Restart from the checkpoint before the spike with these samples skipped."
    if outcome.effect == "partial":
        return "Combine with the other what-ifs to separate data from state."
    if outcome.name == "from" and not outcome.spike_removed:
        return "Remove or repair the batch; restarting from an earlier checkpoint will not help."
    if outcome.name == "from":
        return "Restart from an earlier checkpoint; inspect the optimizer state between them."
    if outcome.name == "lr" and outcome.spike_removed:
        return "Lower the learning rate (or fix the schedule) around this step and restart."
    if outcome.name == "clip" and outcome.spike_removed:
        return "Enable or tighten gradient clipping and restart from the checkpoint before it."
    return "Combine with the other what-ifs to separate data from state."


class InterventionEffectExplainer:
    name = "intervention_effect"
    categories: tuple[str, ...] = ("intervention_effect",)
    defines = (
        Category(
            "intervention_effect",
            "context",
            "info",
            "replay",
            "a what-if experiment's effect",
            "what a replay what-if changed",
        ),
    )

    def run(self, result: ReplayResult) -> list[Finding]:
        return effect_findings(result.interventions, qualified(result))
