"""Explainers of `tscope xray` results: pure functions of the measurement (no torch).

findings = xray_findings(result)      # token_weighting_mismatch, cross_sequence_leak
"""

from __future__ import annotations

from tscope.analyzers.xray.leak import CATEGORIES as LEAK_CATEGORIES
from tscope.analyzers.xray.leak import leak_findings
from tscope.analyzers.xray.rules import RULE_MATCH_TOLERANCE, fit_rules, matching_rules
from tscope.analyzers.xray.weighting import CATEGORIES as WEIGHTING_CATEGORIES
from tscope.analyzers.xray.weighting import weighting_findings
from tscope.model import Finding
from tscope.model.xray import XrayResult

__all__ = [
    "CATEGORIES",
    "RULE_MATCH_TOLERANCE",
    "fit_rules",
    "matching_rules",
    "xray_findings",
]

# The token audit's finding categories, each declared next to the rule that emits it.
CATEGORIES = (*WEIGHTING_CATEGORIES, *LEAK_CATEGORIES)


def xray_findings(result: XrayResult) -> list[Finding]:
    """Every finding the token audit supports: weighting first, then leaks."""
    return weighting_findings(result) + leak_findings(result)
