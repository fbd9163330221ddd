"""Group the unstable runs by how they failed.

Method: agglomerative clustering (scikit-learn, average linkage) with a distance threshold, on a
small feature vector per run:

- the failure kind: the loss exploded (non-finite or above twice its start) or diverged slowly,
  one-hot and scaled so the two kinds are 1.0 apart: more than the threshold, never merged;
- whether the loss went non-finite and whether it recovered, 0.3 each: details of one failure,
  which alone do not split a group (a NaN 100 steps after an explosion is the same explosion);
- the set of signals the run gave (which detectors and explainers fired), as a unit-length
  multi-hot vector scaled so two runs with disjoint signals are 0.5 apart;
- when in the run it blew up (explosion step as a fraction of the logged span), scaled by 0.5.

Why this method: the number of failure modes is unknown (k-means needs it), sweeps are small
(tens to a few thousand runs, so the O(n²) linkage is cheap), the result is deterministic, and a
run unlike any other stays a cluster of one instead of being labelled noise (DBSCAN) or forced
into the nearest group. Stable runs are not clustered at all, so they can never land in a failure
cluster.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tscope.model.cluster import RunProfile

# Runs closer than this (average linkage) fail the same way. Same kind + same signals + similar
# timing is 0; disjoint signals alone 0.5, NaN-or-not plus recovered-or-not alone 0.42 (merged
# unless other differences add up); a different failure kind is ≥ 1.0 (never merged).
MERGE_DISTANCE = 0.6
MODE_WEIGHT = 1.0 / np.sqrt(2.0)  # one-hot vectors of two kinds are √2 apart → 1.0
DETAIL_WEIGHT = 0.3
SIGNAL_WEIGHT = 0.5 / np.sqrt(2.0)  # disjoint unit multi-hot vectors are √2 apart → 0.5
TIMING_WEIGHT = 0.5


def group_unstable(unstable: Sequence[RunProfile]) -> list[list[RunProfile]]:
    """Clusters of unstable runs, largest first (ties: by the first member's name)."""
    if not unstable:
        return []
    if len(unstable) == 1:
        return [list(unstable)]
    from sklearn.cluster import AgglomerativeClustering  # heavy: only when there is work

    features = feature_matrix(unstable)
    labels = AgglomerativeClustering(
        n_clusters=None, distance_threshold=MERGE_DISTANCE, linkage="average"
    ).fit_predict(features)
    groups: dict[int, list[RunProfile]] = {}
    for label, profile in zip(labels.tolist(), unstable, strict=True):
        groups.setdefault(int(label), []).append(profile)
    ordered = [sorted(group, key=lambda p: p.name) for group in groups.values()]
    return sorted(ordered, key=lambda group: (-len(group), group[0].name))


def feature_matrix(profiles: Sequence[RunProfile]) -> np.ndarray:
    """(n_runs, n_features): failure kind and details, signal set, explosion timing."""
    kinds = sorted({signal.kind for p in profiles for signal in p.signals})
    rows = []
    for profile in profiles:
        exploded = profile.failure_mode in ("blowup", "recovered")
        kind = np.array([exploded, not exploded], dtype=float)
        details = np.array(
            [not np.isfinite(profile.loss.values).all(), profile.failure_mode == "recovered"],
            dtype=float,
        )
        present = {signal.kind for signal in profile.signals}
        signals = np.array([kind in present for kind in kinds], dtype=float)
        norm = np.linalg.norm(signals)
        if norm > 0:
            signals /= norm
        rows.append(
            np.concatenate(
                [
                    MODE_WEIGHT * kind,
                    DETAIL_WEIGHT * details,
                    SIGNAL_WEIGHT * signals,
                    [TIMING_WEIGHT * timing(profile)],
                ]
            )
        )
    return np.vstack(rows)


def timing(profile: RunProfile) -> float:
    """Explosion step as a fraction of the logged span (0 = first logged step, 1 = last)."""
    steps = profile.loss.steps
    if profile.explosion_step is None or steps.size < 2 or steps[-1] == steps[0]:
        return 0.0
    return float((profile.explosion_step - steps[0]) / (steps[-1] - steps[0]))
