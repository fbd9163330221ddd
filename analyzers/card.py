"""The incident card: the first screen's facts as fields, so each rendering lays them out alike.

The verdict sentence says the same in prose; the card holds the parts a reader scans for first
(what, when, how bad, the cause, how sure, where to restart) as separate values in case.json.
"""

from __future__ import annotations

import json

from tscope.analyzers.categories import words
from tscope.model import CheckpointInfo, Finding

# How each checkpoint format is resumed, with the checkpoint path filled in: the line to copy.
# The path goes in as a Python string literal (JSON's escapes are Python's too, and keep the
# double quotes a reader expects): it is a stranger's folder name, and a quote in it
# turned the line the reader copies into code (red team, session 27: a checkpoint folder named
# `o"+__import__("os").system(...)+"` ran its command when the line was pasted).
RESUME_COMMANDS = {
    "hf_trainer": "trainer.train(resume_from_checkpoint={path})",
    "lightning": "trainer.fit(model, ckpt_path={path})",
}


def cause_words(category: str) -> str:
    """The category in an engineer's words (analyzers/categories.py)."""
    return words(category)


def incident_card(
    what: str,
    headline: Finding,
    step: int | None,
    cause: Finding | None,
    cause_category: str,
    confidence: float,
    restart: CheckpointInfo | None,
) -> dict[str, object]:
    """The card's fields; `cause` is the finding behind the explanation (None: inferred)."""
    return {
        "what": what,
        "step": step,
        "severity": headline.severity,
        "headline_id": headline.id,
        "cause": {
            "category": cause_category,
            "words": cause_words(cause_category),
            "finding_id": cause.id if cause is not None else None,
            "confidence": round(confidence, 2),
        },
        "restart": _restart(restart),
    }


def _restart(checkpoint: CheckpointInfo | None) -> dict[str, object] | None:
    if checkpoint is None:
        return None
    template = RESUME_COMMANDS.get(checkpoint.format)
    return {
        "path": checkpoint.path,
        "step": checkpoint.step,
        "has_optimizer": checkpoint.has_optimizer,
        "command": template.format(path=json.dumps(checkpoint.path, ensure_ascii=False))
        if template
        else None,
    }
