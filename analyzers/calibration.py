"""Confidences calibrated on the accuracy benchmark: every alert finding's, and the headline's.

**Findings** (`calibrate`, called once in pipeline.build_case before ranking): a rule states a
prior (a literal in its explainer, `Finding.rule_confidence` keeps it); a warning or critical
finding's `confidence` is replaced by the measured right-rate of alert findings like it on the
benchmark's spent splits, from the generated table `finding_calibration_table.py`. A finding is
"right" when it names the planted cause in its window or is a true symptom of it there, and every
alert on a healthy control is wrong (bench/accuracy/causes.py `finding_is_right`). Like findings:
same category, severity and evidence band (the rule's prior in 0.1-wide bands, which tells a
rule's branches and two rules of one category apart). Small counts shrink toward the rate of
the category's other bands and that toward the base rate of all alerts, each level with k =
PSEUDO_COUNTS (2) pseudo-counts:

    base     = (right_all + 1) / (alerts_all + 2)
    category = (right_c + k * base) / (alerts_c + k)
    others   = (right_c - right_cell + k * base) / (alerts_c - alerts_cell + k)
    cell     = min((right_cell + k * others) / (alerts_cell + k), (right_cell + 1) / (alerts_cell + 2))

each stated with two decimals and at most 0.99 (no count here supports a certainty); a cell is
never stated above its own Laplace estimate, so a branch seen once does not borrow its
category's certainty.

A category the benchmark measured but in an unseen severity/band gets the category's rate; a
category it never produced (replay, xray and cluster findings, fp16 overflow, ...) and every info
finding (the benchmark scores alerts only) keep the rule's prior. Regenerate the table, after any
rule change, with one command (it scores the spent splits, ~5 min, then writes it):

    nice -n 10 .venv/bin/python scripts/derive_calibration.py --score --write

**Headline**: the confidence the verdict and the incident card state for the cause is how often a
headline naming that cause category was right on the spent splits (dev, holdout7–16)
of bench/accuracy (runs from
transformers.Trainer with GPT-2 and Llama, a plain-torch nanoGPT loop and Lightning, each with
one planted cause, plus healthy controls), as (right + 1) / (named + 2) — the Laplace estimate,
so a category right 3 times of 3 says 0.8, not 1.0. Categories the benchmark has not headlined
keep their rule's confidence. The counts (`HEADLINE_RIGHT_OF_NAMED`) are generated into the same
table by the same command; a held-out split scores the result once (docs/accuracy-heldout.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import replace

from tscope.analyzers.finding_calibration_table import (
    BY_CATEGORY,
    BY_EVIDENCE,
    HEADLINE_RIGHT_OF_NAMED,
)
from tscope.model import Finding
from tscope.model.categories import ALERT_SEVERITIES


def calibrated_confidence(category: str, rule_confidence: float) -> float:
    """The measured precision of headlines naming `category`, else the rule's own confidence;
    never above `rule_confidence`, the cause finding's own (calibrated) confidence. The headline
    claims what its finding claims: a branch of a rule measured right 0–22% of the time as a
    finding (warmup_too_short's weak branch) must not be stated at the category's 0.94 because
    the category's strong branch makes most of its headlines (bench holdout10
    trainer_gpt2-lr_jump_persistent-41: card 0.94, its finding 0.22, wrong)."""
    counts = HEADLINE_RIGHT_OF_NAMED.get(category)
    if counts is None or rule_confidence <= 0:
        return rule_confidence  # unmeasured, or `undetermined` (0: no cause is claimed)
    right, named = counts
    return min(round((right + 1) / (named + 2), 2), rule_confidence)


def evidence_band(rule_confidence: float) -> float:
    """The rule's prior as a 0.1-wide band (0.0 … 0.9; a prior of 1.0 is in the 0.9 band)."""
    return min(math.floor(rule_confidence * 10 + 1e-9), 9) / 10


def finding_confidence(category: str, severity: str, rule_confidence: float) -> float:
    """The measured right-rate of alert findings like this one, else the rule's prior."""
    if severity not in ALERT_SEVERITIES:
        return rule_confidence
    cell = BY_EVIDENCE.get((category, severity, evidence_band(rule_confidence)))
    if cell is not None:
        return cell[0]
    measured = BY_CATEGORY.get(category)
    return measured[0] if measured is not None else rule_confidence


# Where the benchmark's findings come from: it analyzes logs and checkpoints, never replays, so a
# replay's finding of the same category (which has seen the batch itself) keeps its rule's prior.
MEASURED_SOURCES = frozenset({"logs", "checkpoints"})


def calibrate(findings: Iterable[Finding]) -> list[Finding]:
    """Every finding with its calibrated confidence and its rule's prior kept (once: a finding
    that already carries its prior is left as it is; one from a source the benchmark does not
    measure is left as it is)."""
    return [
        finding
        if finding.rule_confidence is not None or finding.source not in MEASURED_SOURCES
        else replace(
            finding,
            confidence=finding_confidence(finding.category, finding.severity, finding.confidence),
            rule_confidence=finding.confidence,
        )
        for finding in findings
    ]
