"""replay_mismatch: the replay does not reproduce what the run logged, and why it may not."""

from __future__ import annotations

from collections.abc import Sequence

from tscope.analyzers.signals import fmt
from tscope.model import Finding
from tscope.model.categories import Category
from tscope.model.replay import ReplayResult


def mismatch_findings(
    result: ReplayResult, at_step: int | None = None, dropped: Sequence[str] = ()
) -> list[Finding]:
    """One finding when the loss did not reproduce (`at_step`: e.g. the resume being checked;
    `dropped`: what the producer's own resume rule leaves out of this checkpoint, when a replay
    under that rule does reproduce the log — then that is the reason)."""
    fidelity = result.fidelity
    if fidelity.reproduced:
        return []
    reasons = [reason.message for reason in fidelity.reasons]
    if dropped:
        reasons = [f"the resumed run did not restore what the checkpoint holds: {dropped[0]}"]
    step = at_step if at_step is not None else fidelity.first_mismatch_step
    where = (
        f"from step {fidelity.first_mismatch_step}"
        if fidelity.first_mismatch_step is not None
        else "on the compared steps"
    )
    message = (
        f"The replay from checkpoint {result.checkpoint_path} does not reproduce the logged loss "
        f"{where} (max relative difference {fmt(fidelity.max_rel_loss_diff)} over "
        f"{fidelity.compared_steps} compared steps; tolerance {fmt(fidelity.tolerance)})."
    )
    if reasons:
        message += f" Most likely: {reasons[0].rstrip('.')}."
    if at_step is None:
        message += (
            " Its findings describe the replayed run, not the logged one: no cause is named "
            "until the entry file reproduces the log."
        )
    if at_step is not None:
        message += (
            f" The run resumed here: a load that does not give back the state the run had "
            f"(weights, optimizer, scheduler, RNG, data position) changes training from step "
            f"{at_step} on."
        )
    return [
        Finding(
            category="replay_mismatch",
            # A replay that fails to reproduce is news about the replay (the entry file), not the
            # run, unless it checks a resume the run itself made.
            severity="warning" if at_step is not None else "info",
            confidence=0.8 if fidelity.compared_steps >= 3 else 0.5,
            step=step,
            layer=None,
            message=message,
            evidence={
                "checkpoint": result.checkpoint_path,
                "compared_steps": fidelity.compared_steps,
                "max_abs_loss_diff": fidelity.max_abs_loss_diff,
                "max_rel_loss_diff": fidelity.max_rel_loss_diff,
                "first_mismatch_step": fidelity.first_mismatch_step,
                "reasons": ["resume_dropped_state"]
                if dropped
                else [reason.code for reason in fidelity.reasons],
            },
            suggestion=(
                "Findings from this replay describe the replayed run, not necessarily the logged "
                "one. Check the reasons in order: "
                + "; ".join(reasons[:3] or ["the entry file's batches and the restored state"])
            ),
            source="replay",
            threshold=f"relative loss difference > {fmt(fidelity.tolerance)}",
        )
    ]


class MismatchExplainer:
    name = "replay_mismatch"
    categories: tuple[str, ...] = ("replay_mismatch",)
    defines = (
        Category(
            "replay_mismatch",
            "context",
            "warning",
            "replay",
            "a replay that does not reproduce the log",
            "the replayed loss differs from the logged one",
        ),
    )

    def run(self, result: ReplayResult) -> list[Finding]:
        return mismatch_findings(result)
