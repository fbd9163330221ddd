"""The headline cause's confidence, calibrated on the accuracy benchmark's dev split.

A finding's own confidence is its rule's prior (a literal in each explainer). The confidence the
verdict and the incident card state for the cause is what was measured instead: how often a
headline naming that cause category was right on the dev split of bench/accuracy (runs from
transformers.Trainer with GPT-2 and Llama, a plain-torch nanoGPT loop and Lightning, each with
one planted cause, plus healthy controls), as (right + 1) / (named + 2) — the Laplace estimate,
so a category right 3 times of 3 says 0.8, not 1.0. Categories the benchmark has not headlined
keep their rule's confidence. The test split scores the result once (docs/accuracy.md's
reliability table); regenerate these counts with

    .venv/bin/python bench/accuracy/run.py --split dev --no-generate

("Per headline category (precision)").
"""

from __future__ import annotations

# (right, named) per headline cause category, dev split, 95 runs (74 planted, 21 controls),
# measured 2026-12-01 on main after merging the cause competition (analyzers/causes.py), the LR
# ramp rule (explainers/lr_ramp.py) and the data rules (explainers/repeated_data.py,
# bad_batch_logs.py): 91 of 95 headlines right, every miss a planted run called healthy (no
# category named wrongly; 0 alerts on the 21 controls). Every category is right on every dev run
# it headlines, so these say (n + 1) / (n + 2); the held-out split's reliability table is what
# shows whether that is over-confident (docs/accuracy.md).
HEADLINE_RIGHT_OF_NAMED: dict[str, tuple[int, int]] = {
    "lr_schedule_jump": (16, 16),
    "resume_discontinuity": (11, 11),
    "warmup_too_short": (8, 8),
    "frozen_parameters": (8, 8),
    "optimizer_state_reset": (7, 7),
    "repeated_data": (7, 7),
    "bad_batch": (5, 5),
    "lr_ramp": (5, 5),
    "lr_too_high": (3, 3),
}


def calibrated_confidence(category: str, rule_confidence: float) -> float:
    """The measured precision of headlines naming `category`, else the rule's own confidence."""
    counts = HEADLINE_RIGHT_OF_NAMED.get(category)
    if counts is None or rule_confidence <= 0:
        return rule_confidence  # unmeasured, or `undetermined` (0: no cause is claimed)
    right, named = counts
    return round((right + 1) / (named + 2), 2)
