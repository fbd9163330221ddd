"""Cross-run analysis for `tscope cluster`: why did these runs blow up and not those.

    report = cluster_runs(profiles, runs_dir="sweep/")

Pure functions of the run profiles (see `profile.py`): stable runs are set apart first, only the
unstable ones are clustered (`grouping.py`), each cluster gets its discriminant config traits and
nearest stable counterexample (`traits.py`) and its common-fate loss band (`band.py`); spikes that
several runs share at one step are tested across all runs (`aligned.py`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tscope.analyzers.cluster.aligned import (
    ALIGNED_ALPHA,
    ALIGNED_Z,
    ALIGNMENT_TOLERANCE_STEPS,
    aligned_spikes,
)
from tscope.analyzers.cluster.band import loss_band
from tscope.analyzers.cluster.grouping import MERGE_DISTANCE, group_unstable
from tscope.analyzers.cluster.profile import (
    EXPLOSION_FACTOR,
    EXPLOSION_MIN_POINTS,
    LEVEL_POINTS,
    profile_run,
)
from tscope.analyzers.cluster.traits import (
    CHANCE_SPLITS,
    MIN_BALANCED_ACCURACY,
    chance_splits,
    discriminant_traits,
    nearest_stable,
    scored_fields,
    setting_fields,
)
from tscope.model import Finding
from tscope.model.categories import Category
from tscope.model.cluster import AlignedSpike, ClusterReport, RunCluster, RunProfile

# The cluster's finding category (built by _aligned_finding below).
CATEGORIES = (
    Category(
        "data_aligned_spike",
        "context",
        "warning",
        "cluster",
        "spikes at the same step in several runs (the data)",
        "a loss spike at the same step in several runs, more often than chance",
    ),
)

MODE_TEXT = {
    "blowup": "blew up and never recovered",
    "recovered": "blew up, then recovered",
    "divergence": "diverged slowly",
}
# A signal belongs to a cluster's signature when at least half of its members gave it.
SIGNATURE_SHARE = 0.5

__all__ = ["cluster_runs", "profile_run"]


def cluster_runs(profiles: Sequence[RunProfile], runs_dir: str = "") -> ClusterReport:
    profiles = sorted(profiles, key=lambda p: p.name)
    stable = [p for p in profiles if p.status == "stable"]
    unstable = [p for p in profiles if p.status == "unstable"]
    varying = setting_fields(profiles)
    fields = scored_fields(profiles, varying)
    described = [
        _describe(index, group, stable, fields)
        for index, group in enumerate(group_unstable(unstable), start=1)
    ]
    clusters = [cluster for cluster, _ in described]
    limits = _limits(profiles, stable, unstable, fields)
    if len(varying) > len(fields):
        limits.append(
            f"{len(varying):,} settings vary between the runs; traits are scored on the "
            f"{len(fields):,} recorded by the most runs."
        )
    limits.extend(note for _, note in described if note is not None)
    aligned = aligned_spikes(profiles)
    report = ClusterReport(
        runs_dir=runs_dir,
        profiles=list(profiles),
        clusters=clusters,
        aligned_spikes=aligned,
        findings=[_aligned_finding(event, profiles) for event in aligned],
        limits=limits,
        method={
            "status": f"unstable = non-finite loss, loss ≥ {EXPLOSION_FACTOR:g}× the run's own "
            f"early baseline or ≥ {EXPLOSION_FACTOR:g}× its level before the event (median of the "
            f"{LEVEL_POINTS} points before) for ≥ {EXPLOSION_MIN_POINTS} consecutive points, or a "
            "critical "
            "divergence finding of the single-run analysis",
            "clustering": "scikit-learn agglomerative clustering (average linkage, distance "
            f"threshold {MERGE_DISTANCE}) over failure mode, signal set and explosion timing; "
            "stable runs are never clustered",
            "traits": f"single-field rules scored by balanced accuracy ≥ {MIN_BALANCED_ACCURACY}",
            "aligned_spikes": f"per-run loss alarms ≥ {ALIGNED_Z} robust σ, coincident within "
            f"±{ALIGNMENT_TOLERANCE_STEPS} step, Poisson tail p < {ALIGNED_ALPHA} / steps tested",
        },
    )
    report.summary = _summary(report, stable, unstable)
    return report


def _describe(
    index: int, members: list[RunProfile], stable: list[RunProfile], fields: list[str]
) -> tuple[RunCluster, str | None]:
    """The cluster, and the `limits` line when its best trait is no better than chance. Traits
    as good as chance are dropped: a split expected among that many settings explains nothing."""
    modes = [p.failure_mode or "divergence" for p in members]
    mode = max(set(modes), key=lambda m: (modes.count(m), m))
    traits = discriminant_traits(members, stable, fields)
    expected = [chance_splits(t, len(members), len(stable), len(fields)) for t in traits]
    chance_note = None
    if traits and expected[0] >= CHANCE_SPLITS:
        chance_note = (
            f"C{index}: its best trait ({traits[0].text}) may be chance: with {len(members)} "
            f"runs against {len(stable)} stable ones and {len(fields):,} settings compared, "
            f"about {expected[0]:.3g} settings would separate them as well at random."
        )
    traits = [t for t, chance in zip(traits, expected, strict=True) if chance < CHANCE_SPLITS]
    leads = [p.lead_steps for p in members if p.lead_steps is not None]
    warned = len(leads)
    if len(leads) < SIGNATURE_SHARE * len(members):
        leads = []  # most members gave no warning: a "typical" lead would describe a minority
    signature = _signature(members)
    went_nonfinite = sum(not np.isfinite(p.loss.values).all() for p in members)
    label = MODE_TEXT[mode][0].upper() + MODE_TEXT[mode][1:]
    if went_nonfinite:
        label += f" ({went_nonfinite} of {len(members)} to NaN/Inf)"
    if traits:
        label += f"; {traits[0].text}"
    cluster = RunCluster(
        id=f"C{index}",
        label=label,
        members=tuple(p.name for p in members),
        failure_mode=mode,
        signals=signature,
        typical_lead_steps=int(np.median(leads)) if leads else None,
        warned_members=warned,
        traits=tuple(traits),
        band=loss_band(members),
        counterexample=nearest_stable(members, stable, fields, [t.field for t in traits]),
    )
    return cluster, chance_note


def _signature(members: list[RunProfile]) -> tuple[tuple[str, int, int], ...]:
    """(kind, members that gave it, median step relative to the explosion), in step order."""
    offsets: dict[str, list[int]] = {}
    for profile in members:
        for signal in profile.signals:
            offsets.setdefault(signal.kind, []).append(signal.step - (profile.explosion_step or 0))
    needed = SIGNATURE_SHARE * len(members)
    rows = [
        (kind, len(values), int(np.median(values)))
        for kind, values in offsets.items()
        if len(values) >= needed
    ]
    return tuple(sorted(rows, key=lambda row: (row[2], row[0])))


def _aligned_finding(event: AlignedSpike, profiles: Sequence[RunProfile]) -> Finding:
    by_name = {p.name: p for p in profiles}
    exploded_here = [
        name
        for name in event.runs
        if by_name[name].explosion_step is not None
        and abs(by_name[name].explosion_step - event.last_step) <= 1  # type: ignore[operator]
    ]
    where = (
        f"step {event.first_step}"
        if event.first_step == event.last_step
        else f"steps {event.first_step}–{event.last_step}"
    )
    reading = {
        "yes": f"They read the same data in the same order ({event.data_order_evidence}): the "
        "batch at this step is the likely cause, not the runs' settings.",
        "no": f"They do not share a data order ({event.data_order_evidence}); look for a shared "
        "schedule event or a shared infrastructure incident at this step.",
        "unknown": f"If these runs read the same data in the same order ({event.data_order_evidence}"
        "), the batch at this step is the likely cause, not the runs' settings.",
    }[event.shared_data_order]
    message = (
        f"Loss spikes at {where} in {len(event.runs)} of {event.runs_compared} runs "
        f"(chance of this coincidence p = {event.p_value:.1e}). {reading}"
    )
    return Finding(
        category="data_aligned_spike",
        severity="warning" if exploded_here else "info",
        confidence=0.9 if event.shared_data_order == "yes" else 0.6,
        step=event.first_step,
        layer=None,
        message=message,
        evidence={
            "runs": list(event.runs),
            "peak_steps": list(event.peak_steps),
            "runs_compared": event.runs_compared,
            "p_value": event.p_value,
            "shared_data_order": event.shared_data_order,
            "runs_that_blew_up_here": exploded_here,
        },
        suggestion=f"Inspect the batches consumed at {where} (decode them from the data loader "
        "with the run's seed); `tscope replay --around STEP` names the outlier samples.",
        source="cluster",
    )


def _limits(
    profiles: Sequence[RunProfile],
    stable: Sequence[RunProfile],
    unstable: Sequence[RunProfile],
    fields: Sequence[str],
) -> list[str]:
    limits = []
    if unstable and not stable:
        limits.append(
            "Every run is unstable: there is no stable run to contrast the configs with, so no "
            "discriminant trait or counterexample can be given."
        )
    if not fields:
        limits.append(
            "No run records a configuration that varies between runs (no TensorBoard args, "
            "trainer config, W&B config or printed flags): traits come from settings only."
        )
    no_config = [p.name for p in profiles if not p.config]
    if no_config and len(no_config) < len(profiles):
        limits.append(
            f"{len(no_config)} runs have no recorded configuration "
            f"(e.g. {no_config[0]}); they are compared on their curves only."
        )
    return limits


STABLE_INCIDENTS_NAMED = 5  # stable runs with an incident named in the verdict; the rest counted


def _summary(
    report: ClusterReport, stable: Sequence[RunProfile], unstable: Sequence[RunProfile]
) -> dict[str, object]:
    total = len(report.profiles)
    if not unstable:
        verdict = f"All {total} runs are stable (none blew up)."
    else:
        parts = [f"{len(unstable)} of {total} runs blew up"]
        if len(report.clusters) == 1 and len(unstable) > 1:
            parts.append("all the same way")
        elif len(report.clusters) > 1:
            parts.append(f"in {len(report.clusters)} different ways")
        first = report.clusters[0]
        if first.traits:
            group = (
                "it has"
                if len(unstable) == 1
                else f"the largest group ({len(first.members)} runs) has"
                if len(report.clusters) > 1
                else "they have"
            )
            parts.append(
                f"{group} {first.traits[0].text}, which separates "
                f"{'it' if len(first.members) == 1 else 'them'} from the {len(stable)} stable "
                f"run{'s' if len(stable) != 1 else ''}"
            )
        verdict = "; ".join(parts) + "."
    # Stable means it did not blow up, not that nothing happened: a recovered bad batch or an
    # overfitting run is an incident its own case reports ("All 4 runs are stable" hid both).
    troubled = [p.name for p in stable if p.case_status == "incident"]
    if troubled:
        shown = ", ".join(troubled[:STABLE_INCIDENTS_NAMED])
        more = len(troubled) - STABLE_INCIDENTS_NAMED
        verdict += (
            f" {len(troubled)} of the stable runs had an incident their own case reports ("
            + shown
            + (f" and {more} more" if more > 0 else "")
            + ")."
        )
    aligned = [f for f in report.findings if f.category == "data_aligned_spike"]
    if aligned:
        verdict += f" {len(aligned)} loss spikes recur at the same step across runs (data-aligned)."
    return {
        "verdict": verdict,
        "runs": total,
        "stable": len(stable),
        "unstable": len(unstable),
        "clusters": len(report.clusters),
        "aligned_spikes": len(aligned),
    }
