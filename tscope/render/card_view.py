"""The incident card as the templates print it: severity, what, when, cause, confidence, restart.

The analyzers filled summary.card (tscope.analyzers.card); here each value becomes the words on
the page, and the confidence number gets the word a reader acts on, with the legend beside it.
"""

from __future__ import annotations

from typing import Any

from tscope.model.case_parts import RestartPoint, Summary
from tscope.render.formatting import format_number, format_step, one_line, parse_number

# A confidence is the analyzers' estimate that this cause explains the incident (0–1). Read as
# words: from 0.8 the evidence points one way; from 0.5 it is the best of several explanations;
# below, a lead to check first. The legend under the card prints these same bounds.
CONFIDENCE_WORDS = ((0.8, "high"), (0.5, "medium"), (0.0, "low"))
CONFIDENCE_LEGEND = (
    "Confidence is tscope's estimate (0–1) that this cause explains the incident: "
    "high ≥ 0.8 (the evidence points one way), medium 0.5–0.8 (the best of several "
    "explanations), low < 0.5 (a lead to check first)."
)
SEVERITY_WORDS = {
    "critical": "Critical: the run is broken or about to be (NaN, divergence)",
    "warning": "Warning: an incident that cost training progress",
    "info": "Info: worth knowing, nothing to act on",
}


def confidence_word(confidence: float | None) -> str:
    if confidence is None:
        return "unknown"
    # A hand-edited case.json may hold a negative or NaN confidence: below every bound, it has
    # no word (it ended `tscope report` in StopIteration).
    return next((word for bound, word in CONFIDENCE_WORDS if confidence >= bound), "unknown")


def card_view(summary: Summary) -> dict[str, Any] | None:
    """None when the case has no incident (healthy, no data) or predates the card."""
    card = summary.card
    if card is None:
        return None
    cause = card.cause
    confidence = parse_number(cause.confidence)
    what = one_line(card.what)
    severity = card.severity
    return {
        "severity": severity,
        "severity_words": SEVERITY_WORDS.get(severity, severity),
        "what": what,  # sentence-started by the summary, which knows the run's names
        "step": format_step(card.step),
        # A finding of no one step (the token audit's weighting, a checkpoint statistic) says so.
        "when": f"step {format_step(card.step)}" if card.step is not None else "not one step",
        "headline_id": card.headline_id,
        "cause_words": one_line(cause.words),
        "cause_category": cause.category,
        "cause_finding": cause.finding_id or "",
        "confidence_word": confidence_word(confidence),
        "confidence": format_number(confidence),
        "confidence_legend": CONFIDENCE_LEGEND,
        "restart": _restart_view(card.restart),
    }


def _restart_view(restart: RestartPoint | None) -> dict[str, str] | None:
    if restart is None:
        return None
    holds = "with optimizer state" if restart.has_optimizer else "weights only"
    return {
        "path": restart.path,
        "step": format_step(restart.step),
        "holds": holds,
        "command": restart.command or "",
    }
