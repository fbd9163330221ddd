"""router_collapse from logged routing shares: one expert takes (nearly) every token, and stays so.

The shares are the fraction of a router's tokens each expert received at a step, as a recorder
logs them (trainscope's `moe.arrow`, read as `moe/<block>/expert_<i>_share`). A block collapses
at the first logged point from which its largest share stays ≥ ROUTER_COLLAPSE_FRACTION for
PERSIST_POINTS points in a row — the replay's threshold (analyzers/replay/layers.py), so the two
sources call the same thing a collapse.
"""

from __future__ import annotations

import re

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.replay.layers import ROUTER_COLLAPSE_FRACTION
from tscope.analyzers.signals import fmt
from tscope.model import Finding, Run

_SHARE = re.compile(r"^moe/(?P<block>.+)/expert_(?P<expert>\d+)_share$")
# Persistently: 5 logged points in a row. A router's top share swings from batch to batch: in the
# healthy recording (fixtures/data/trainscope/healthy, 4 experts, 160 steps, load-balancing loss
# on) it peaks at 0.86 on single steps (0.80 after step 20), median 0.42, and is never ≥ 0.9 even
# once; on the planted run (balancing loss dropped at step 80) it is ≥ 0.9 at 80 of the 80 points
# from step 80 (scripts/measure_rules.py --layers).
PERSIST_POINTS = 5


class RoutingExplainer:
    name = "routing"
    categories: tuple[str, ...] = ("router_collapse",)
    defines = ()  # its categories are declared by the explainers that mainly produce them

    def run(self, evidence: Evidence) -> list[Finding]:
        findings = []
        for block, (steps, shares) in routing_shares(evidence.run).items():
            finding = _collapse(block, steps, shares)
            if finding is not None:
                findings.append(finding)
        return findings


def routing_shares(run: Run) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """block -> (steps, shares[step, expert]) over the steps every expert's share was logged."""
    experts: dict[str, dict[int, str]] = {}
    for name in run.metric_names:
        match = _SHARE.match(name)
        if match:
            experts.setdefault(match["block"], {})[int(match["expert"])] = name
    found = {}
    for block, names in sorted(experts.items()):
        if len(names) < 2:
            continue
        columns = [run.series(names[e]) for e in sorted(names)]
        common = columns[0][0]
        for steps, _ in columns[1:]:
            common = np.intersect1d(common, steps)
        matrix = np.column_stack(
            [values[np.searchsorted(steps, common)] for steps, values in columns]
        )
        found[block] = (common, matrix)
    return found


def _collapse(block: str, steps: np.ndarray, shares: np.ndarray) -> Finding | None:
    top = np.nanmax(shares, axis=1)
    collapsed = top >= ROUTER_COLLAPSE_FRACTION
    onset = None
    for i in range(0, collapsed.size - PERSIST_POINTS + 1):
        if collapsed[i : i + PERSIST_POINTS].all():
            onset = i
            break
    if onset is None:
        return None
    expert = int(np.nanargmax(shares[onset]))
    before = float(np.median(top[:onset])) if onset else None
    after = collapsed[onset:]
    n_experts = shares.shape[1]
    return Finding(
        category="router_collapse",
        severity="warning",
        confidence=0.7,
        step=int(steps[onset]),
        layer=block,
        message=(
            f"Router {block} collapsed at step {int(steps[onset])}: expert {expert} received "
            f"{fmt(float(shares[onset, expert]) * 100)}% of the tokens (of {n_experts} experts), "
            f"and one expert kept ≥ {ROUTER_COLLAPSE_FRACTION:.0%} in {int(after.sum())} of the "
            f"{after.size} logged points after it"
            + (f"; before, the top share was {fmt(before * 100)}% (median)." if before else ".")
        ),
        evidence={
            "expert": expert,
            "share_at_onset": float(shares[onset, expert]),
            "experts": n_experts,
            "median_top_share_before": before,
            "collapsed_points_after": int(after.sum()),
            "points_after": int(after.size),
            "balanced_share": 1.0 / n_experts,
        },
        suggestion=(
            "Check the router's load-balancing (auxiliary) loss and its coefficient, the router's "
            "bias and learning rate, and the capacity factor; restart from a checkpoint before "
            f"step {int(steps[onset])}."
        ),
        threshold=(
            f"top expert share ≥ {ROUTER_COLLAPSE_FRACTION:.0%} for {PERSIST_POINTS} logged points "
            "in a row (the replay's router_collapse threshold)"
        ),
    )
