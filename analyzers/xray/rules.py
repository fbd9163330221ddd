"""The closed-form normalisation rules measured weights are matched against.

Every rule gives the weight of each target token, scaled like the measurement (a global token
mean is 1.0 for every token). With N targets in the step, S sequences, M micro-batches (forward
calls, over all ranks), R ranks, L_s targets in the token's sequence, T_m in its micro-batch
and T_r on its rank:

    token_mean                 1                 sum of token losses / N
    sum                        N                 sum of token losses
    sequence_mean              N / (S·L_s)       mean over sequences of each sequence's mean
    micro_batch_mean           N / (M·T_m)       mean over micro-batches of each one's token mean
                                                 (accumulation as loss / gradient_accumulation_steps)
    sum_of_micro_batch_means   N / T_m           the same without dividing by the micro-batches
    per_rank_mean              N / (R·T_r)       each rank's token mean, averaged by the all-reduce
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence

from tscope.model.xray import RuleFit, TokenWeight

# A rule matches when every weight is within this relative distance of it. Float32 gradients on
# the tracer reproduce a rule to ~1e-6 (measured); 1e-3 leaves room and still separates rules
# whose weights differ by a token in a thousand.
RULE_MATCH_TOLERANCE = 1e-3


def _rules(tokens: Sequence[TokenWeight]) -> dict[str, Callable[[TokenWeight], float]]:
    n = len(tokens)
    per_sequence = Counter(t.sequence for t in tokens)
    per_micro = Counter(t.micro_batch for t in tokens)
    per_rank = Counter(t.rank for t in tokens)
    sequences, micro_batches, ranks = len(per_sequence), len(per_micro), len(per_rank)
    rules: dict[str, Callable[[TokenWeight], float]] = {
        "token_mean": lambda t: 1.0,
        "sum": lambda t: float(n),
        "sequence_mean": lambda t: n / (sequences * per_sequence[t.sequence]),
    }
    if all(t.micro_batch is not None for t in tokens):
        rules["micro_batch_mean"] = lambda t: n / (micro_batches * per_micro[t.micro_batch])
        rules["sum_of_micro_batch_means"] = lambda t: n / per_micro[t.micro_batch]
    if ranks > 1:
        rules["per_rank_mean"] = lambda t: n / (ranks * per_rank[t.rank])
    return rules


def fit_rules(tokens: Sequence[TokenWeight]) -> tuple[RuleFit, ...]:
    """Every applicable rule with its max relative deviation from the measured weights."""
    fits = []
    for name, rule in _rules(tokens).items():
        expected = tuple(rule(t) for t in tokens)
        deviation = max(
            (abs(t.weight - e) / e for t, e in zip(tokens, expected, strict=True)),
            default=0.0,
        )
        fits.append(RuleFit(name, deviation, expected))
    return tuple(sorted(fits, key=lambda f: f.rule))


def matching_rules(fits: Sequence[RuleFit]) -> list[str]:
    """The rules the weights agree with (several when the probe cannot tell them apart)."""
    return sorted(f.rule for f in fits if f.max_deviation <= RULE_MATCH_TOLERANCE)
