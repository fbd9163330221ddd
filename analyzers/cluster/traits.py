"""What the failing runs' configs share that the stable runs' do not, and the nearest stable run.

A trait is one config field with a rule — `learning_rate ≥ 5`, `fp16 = True` — scored by balanced
accuracy: (share of the cluster's members that match + share of the stable runs that do not) / 2.
1.0 separates perfectly; 0.5 is no better than ignoring the field.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

from tscope.model.cluster import Counterexample, RunProfile, Trait

# A trait is reported when it classifies members and stable runs this well on average: 0.8 means,
# e.g., every member matches and at most 40% of the stable runs do, so the field carries most of
# the separation. Weaker traits are listed in no report: with few runs they are coincidences.
MIN_BALANCED_ACCURACY = 0.8
MAX_TRAITS = 6
# A field must be known for at least this share of the members and of the stable runs; a field
# that only some sources log (TensorBoard args in half the runs) would otherwise separate the
# runs by how they were logged.
MIN_FIELD_COVERAGE = 0.5
# Fields that name or locate a run, or record its outcome rather than its setup: they differ
# between any two runs (or because of the failure), so they explain nothing.
_NOT_SETTINGS = re.compile(
    r"(^|\.)(output_dir|logging_dir|run_name|run_id|name|id|resume_from_checkpoint|"
    r"best_model_checkpoint|best_metric|global_step|epoch|total_flos|num_input_tokens_seen|"
    r"train_runtime|train_samples_per_second|train_steps_per_second|hub_token|hub_model_id|"
    r"push_to_hub_model_id|push_to_hub_token|_wandb|wandb_summary|start_time|timestamp)($|\.)"
)
DERIVED_PREFIX = "logged."  # fields measured from the logs rather than configured
# Fields scored for traits, those recorded by the most runs first: real sweeps vary tens to
# hundreds of settings. 30 crafted runs of 100,000 random hparams each took 89 s and 1.8 GB and
# "explained" their failures by one of them (red team, session 31).
MAX_SCORED_FIELDS = 2_000
# A trait is no evidence when, over this many fields, as good a split is expected by chance:
# with few runs a perfect split of random values is likely somewhere among many fields (5 vs 5
# runs: 1 field in 126; with 2,000 fields, about 16 of them).
CHANCE_SPLITS = 1.0


def setting_fields(profiles: Sequence[RunProfile]) -> list[str]:
    """Config fields that describe a run's setup and vary between the runs."""
    fields = sorted({name for p in profiles for name in p.config})
    keep = []
    for name in fields:
        if _NOT_SETTINGS.search(name):
            continue
        values = [p.config[name] for p in profiles if name in p.config]
        if len({_key(v) for v in values}) < 2 and len(values) == len(profiles):
            continue  # the same everywhere
        strings = [v for v in values if isinstance(v, str)]
        if (
            len(profiles) >= 3
            and len(strings) == len(profiles)
            and len(set(strings)) == len(strings)
        ):
            continue  # a different string in every run: an identifier, not a setting
        keep.append(name)
    return keep


def scored_fields(profiles: Sequence[RunProfile], fields: Sequence[str]) -> list[str]:
    """At most MAX_SCORED_FIELDS of `fields`, those recorded by the most runs first, by name."""
    if len(fields) <= MAX_SCORED_FIELDS:
        return list(fields)
    recorded = {name: sum(name in p.config for p in profiles) for name in fields}
    chosen = sorted(fields, key=lambda name: (-recorded[name], name))[:MAX_SCORED_FIELDS]
    return sorted(chosen)


def chance_splits(trait: Trait, n_members: int, n_stable: int, n_fields: int) -> float:
    """How many of `n_fields` unrelated fields would separate the runs as well as `trait` does
    (its permutation p-value times the fields tried): a number rule is the two-sample
    Kolmogorov-Smirnov statistic (balanced accuracy = (1 + D) / 2, the best threshold either way),
    a value rule a one-sided Fisher test times the values tried."""
    from scipy.stats import fisher_exact, ks_2samp

    if trait.op == "==":
        member_hits = sum(_key(v) == _key(trait.value) for v in trait.member_values)
        stable_hits = sum(_key(v) == _key(trait.value) for v in trait.stable_values)
        table = [[member_hits, n_members - member_hits], [stable_hits, n_stable - stable_hits]]
        tried = len({_key(v) for v in trait.member_values})
        p_value = min(1.0, float(fisher_exact(table, alternative="greater").pvalue) * tried)
    else:
        # Only numbers: a stable run may record "auto" or None where the members record numbers.
        members = [float(v) for v in trait.member_values if _is_number(v)]
        stable = [float(v) for v in trait.stable_values if _is_number(v)]
        if not members or not stable:
            return float(n_fields)
        p_value = float(ks_2samp(members, stable, method="exact").pvalue)
    return p_value * n_fields


def discriminant_traits(
    members: Sequence[RunProfile], stable: Sequence[RunProfile], fields: Sequence[str]
) -> list[Trait]:
    traits = []
    for name in fields:
        member_values = [p.config[name] for p in members if name in p.config]
        stable_values = [p.config[name] for p in stable if name in p.config]
        if (
            len(member_values) < MIN_FIELD_COVERAGE * len(members)
            or len(stable_values) < MIN_FIELD_COVERAGE * len(stable)
            or not member_values
            or not stable_values
        ):
            continue
        trait = _best_rule(name, member_values, stable_values, len(members), len(stable))
        if trait is not None and trait.balanced_accuracy >= MIN_BALANCED_ACCURACY:
            traits.append(trait)
    traits.sort(key=_trait_order)
    return traits[:MAX_TRAITS]


def _trait_order(trait: Trait) -> tuple[float, bool, float, str]:
    return (
        -trait.balanced_accuracy,
        trait.field.startswith(DERIVED_PREFIX),
        -_margin(trait),
        trait.field,
    )


def _best_rule(
    name: str, member_values: list[Any], stable_values: list[Any], n_members: int, n_stable: int
) -> Trait | None:
    """The rule on one field that best separates members from stable runs (absent = no match)."""
    best: tuple[float, str, Any] | None = None
    numeric_members = [v for v in member_values if _is_number(v)]
    numeric_stable = [v for v in stable_values if _is_number(v)]
    if numeric_members and len(numeric_members) == len(member_values):
        for threshold in sorted(set(numeric_members)):
            for op in (">=", "<="):
                score = _score(
                    sum(_holds(v, op, threshold) for v in numeric_members),
                    sum(_holds(v, op, threshold) for v in numeric_stable),
                    n_members,
                    n_stable,
                )
                if best is None or score > best[0] + 1e-12:
                    best = (score, op, threshold)
    else:
        for value in sorted({_key(v) for v in member_values}, key=str):
            score = _score(
                sum(_key(v) == value for v in member_values),
                sum(_key(v) == value for v in stable_values),
                n_members,
                n_stable,
            )
            if best is None or score > best[0] + 1e-12:
                original = next(v for v in member_values if _key(v) == value)
                best = (score, "==", original)
    if best is None:
        return None
    score, op, value = best
    return Trait(
        field=name,
        op=op,
        value=value,
        balanced_accuracy=round(score, 4),
        member_values=tuple(sorted(member_values, key=_sort_key)),
        stable_values=tuple(sorted(stable_values, key=_sort_key)),
    )


def _score(member_hits: int, stable_hits: int, n_members: int, n_stable: int) -> float:
    return (member_hits / n_members + 1.0 - stable_hits / n_stable) / 2.0


def _holds(value: Any, op: str, threshold: Any) -> bool:
    return bool(value >= threshold) if op == ">=" else bool(value <= threshold)


def _margin(trait: Trait) -> float:
    """How far the rule's boundary lies from the nearest stable value (decades when positive)."""
    if trait.op == "==":
        return 0.0
    stable = [v for v in trait.stable_values if _is_number(v)]
    if not stable:
        return 0.0
    nearest = max(stable) if trait.op == ">=" else min(stable)
    boundary, other = float(trait.value), float(nearest)
    if boundary > 0 and other > 0:
        return abs(math.log10(boundary / other))
    return abs(boundary - other)


def nearest_stable(
    members: Sequence[RunProfile],
    stable: Sequence[RunProfile],
    fields: Sequence[str],
    trait_fields: Sequence[str] = (),
) -> Counterexample | None:
    """The (member, stable run) pair whose settings differ in the fewest fields."""
    best: tuple[tuple[int, float, str, str], Counterexample] | None = None
    settings = [name for name in fields if not name.startswith(DERIVED_PREFIX)]
    for member in members:
        for other in stable:
            diff = config_diff(member.config, other.config, settings, trait_fields)
            spread = sum(_log_distance(mine, theirs) for _, mine, theirs in diff)
            key = (len(diff), spread, member.name, other.name)
            if best is None or key < best[0]:
                best = (key, Counterexample(member.name, other.name, len(diff), tuple(diff)))
    return None if best is None else best[1]


def config_diff(
    mine: dict[str, Any], theirs: dict[str, Any], fields: Sequence[str], first: Sequence[str] = ()
) -> list[tuple[str, Any, Any]]:
    """Fields whose values differ (a field one run lacks counts), trait fields first."""
    diff = []
    for name in fields:
        if name not in mine and name not in theirs:
            continue
        a, b = mine.get(name), theirs.get(name)
        if name in mine and name in theirs and _same(a, b):
            continue
        diff.append((name, a, b))
    rank = {name: i for i, name in enumerate(first)}
    return sorted(diff, key=lambda item: (rank.get(item[0], len(rank)), item[0]))


def _same(a: Any, b: Any) -> bool:
    if _is_number(a) and _is_number(b):
        return math.isclose(float(a), float(b), rel_tol=1e-9, abs_tol=0.0)
    same: bool = _key(a) == _key(b)
    return same


def _log_distance(a: Any, b: Any) -> float:
    if _is_number(a) and _is_number(b) and float(a) > 0 and float(b) > 0:
        return abs(math.log10(float(a) / float(b)))
    return 1.0


def _is_number(value: Any) -> bool:
    return (
        isinstance(value, (int, float))
        and not isinstance(value, bool)
        and math.isfinite(float(value))
    )


def _key(value: Any) -> Any:
    """Hashable, type-aware identity (True and 1 are different settings)."""
    return (type(value).__name__, str(value))


def _sort_key(value: Any) -> tuple[int, Any]:
    return (0, float(value)) if _is_number(value) else (1, str(value))
