"""How the cause competition's losers read next to its winner (analyzers/causes.py `compete`):
whether a losing candidate is the winner's own event seen from other evidence, and the specific
reason one explains the incident less well. The summary and the next steps word the
alternatives with these."""

from __future__ import annotations

from tscope.analyzers.categories import words
from tscope.analyzers.causes import SAME_EVENT, SAME_EVENT_STEPS, Candidate


def corroborates(candidate: Candidate, winner: Candidate | None) -> bool:
    """Whether `candidate` is the verdict's own event seen from other evidence."""
    if winner is None or candidate is winner:
        return False
    if candidate.category == winner.category:
        return True
    if candidate.step is None or winner.step is None:
        return False
    return abs(candidate.step - winner.step) <= SAME_EVENT_STEPS and any(
        {candidate.category, winner.category} <= family for family in SAME_EVENT
    )


def against(candidate: Candidate, winner: Candidate | None, shape: str | None) -> str:
    """The specific reason a losing candidate explains the incident less well."""
    name = words(candidate.category)
    where = f" (step {candidate.step})" if candidate.step is not None else ""
    if not candidate.timed:
        return f"less likely {name}{where}: it does not act where the incident starts"
    if candidate.category == "bad_batch" and candidate.finding is None and shape == "ramp":
        return (
            "not a bad batch: the loss rose over several logged points before its peak; "
            "one bad batch breaks it in one step"
        )
    if (
        candidate.category == "bad_batch"
        and winner is not None
        and winner.category == "warmup_too_short"
    ):
        # Also when the bad-batch rule measured the break: its shape and gradient norm are what
        # an update that broke the model gives too.
        return (
            "less likely a bad batch: the break came early in a run whose LR had no (or too "
            "short a) warm-up, where the update itself is the usual culprit (a one-step break "
            "with a large gradient norm is what both give); a bad batch would break the loss "
            "again when its steps are replayed at a lower LR (`tscope replay --around "
            f"{candidate.step}` tells them apart)"
        )
    if candidate.category == "bad_batch" and candidate.finding is None and winner is not None:
        return f"not a bad batch alone: {words(winner.category)} precedes the spike"
    if not candidate.measured:
        return f"less likely {name}: inferred only, while the verdict's cause was measured"
    if not candidate.shape and shape is not None:
        return f"less likely {name}{where}: the incident's shape ({shape.replace('_', ' ')}) is not the one it gives"
    return f"less likely {name}{where}: ranked below the verdict's cause on the same evidence"
