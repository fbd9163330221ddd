"""What `tscope xray` measured: per-token gradient weights, the closed-form rules they were
matched against, and the leak matrix — the model behind xray.json (docs/xray-schema.md)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

INTENDED_RULES = ("token_mean", "sequence_mean", "sum")
XRAY_MODES = ("entry", "trainer")


@dataclass(frozen=True)
class TokenWeight:
    """One target token: its gradient weight (a global token mean gives 1.0) and cos(g, r)."""

    sequence: int
    position: int  # index within the sequence of the token being predicted (≥ 1)
    weight: float
    cosine: float
    micro_batch: int | None  # the forward call that held it, in call order over all ranks
    rank: int = 0


@dataclass(frozen=True)
class RuleFit:
    """A closed-form normalisation rule and how far the measured weights are from it."""

    rule: str
    max_deviation: float  # max over targets of |measured − rule| / rule
    expected: tuple[float, ...]  # the rule's weight per target, in `tokens` order


@dataclass(frozen=True)
class XrayResult:
    mode: str  # one of XRAY_MODES
    source: str  # the entry file or the run directory, as given
    lengths: tuple[int, ...]
    intended: str
    tokens: tuple[TokenWeight, ...]
    forward_calls: int  # micro-batches the step made (all ranks)
    world_size: int
    boundary_weight: float  # gradient on sequences' last tokens / median target row gradient
    leak_matrix: tuple[tuple[float, ...], ...]
    leak_threshold: float
    nan_forwards: int = 0
    fits: tuple[RuleFit, ...] = ()
    matched_rules: tuple[str, ...] = ()  # every rule within the match tolerance
    settings: dict[str, Any] = field(default_factory=dict)  # Trainer arguments used (trainer mode)
    notes: tuple[str, ...] = ()
    seconds: float = 0.0

    def fit(self, rule: str) -> RuleFit | None:
        return next((f for f in self.fits if f.rule == rule), None)

    def best_fit(self) -> RuleFit | None:
        """The closest rule; on a tie (the probe cannot tell them apart) the intended one."""
        return min(
            self.fits,
            key=lambda f: (f.max_deviation, f.rule != self.intended, f.rule),
            default=None,
        )

    def to_dict(self) -> dict[str, Any]:
        best = self.best_fit()
        intended = self.fit(self.intended)
        return {
            "mode": self.mode,
            "source": self.source,
            "lengths": list(self.lengths),
            "intended": self.intended,
            "world_size": self.world_size,
            "forward_calls": self.forward_calls,
            "tokens": [
                {
                    "sequence": t.sequence,
                    "position": t.position,
                    "weight": t.weight,
                    "cosine": t.cosine,
                    "micro_batch": t.micro_batch,
                    "rank": t.rank,
                    "expected": {f.rule: f.expected[i] for f in self.fits},
                }
                for i, t in enumerate(self.tokens)
            ],
            "rules": [{"rule": f.rule, "max_deviation": f.max_deviation} for f in self.fits],
            "matched_rule": best.rule if best is not None else None,
            "matched_rules": list(self.matched_rules),
            "matched_max_deviation": best.max_deviation if best is not None else None,
            "intended_max_deviation": intended.max_deviation if intended is not None else None,
            "min_cosine": min((t.cosine for t in self.tokens), default=None),
            "boundary_weight": self.boundary_weight,
            "leak": {
                "matrix": [list(row) for row in self.leak_matrix],
                "threshold": self.leak_threshold,
                "max": max_leak(self.leak_matrix),
                "nan_forwards": self.nan_forwards,
            },
            "settings": self.settings,
            "notes": list(self.notes),
            "seconds": self.seconds,
        }


def max_leak(matrix: tuple[tuple[float, ...], ...]) -> float:
    """The largest off-diagonal entry: gradient reaching a sequence that was not labelled."""
    return max(
        (value for s, row in enumerate(matrix) for t, value in enumerate(row) if s != t),
        default=0.0,
    )
