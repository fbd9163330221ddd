"""frozen_parameters: tensors that never change across checkpoints, or stopped changing; a defect
when the optimizer was meant to train them, intentional when it never held them (the weights
explainer, weights.py, asks)."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

from tscope.model import Finding

if TYPE_CHECKING:
    import pandas as pd

# Frozen: no change at all in any checkpoint window while at least this share of tensors moved
# (identical checkpoints, nothing trained between them, are no frozen block).
FROZEN_MIN_MOVING_SHARE = 0.5
# Stopped mid-run, seen in one checkpoint: torch's Adam/AdamW counts steps per parameter and skips
# a parameter without a gradient, so a block frozen at step S keeps its moments with a counter
# stuck at S - 1 while the rest count on. Flagged when the counter trails the checkpoint's largest
# by at least FROZEN_MIN_LAG_STEPS and by more than (1 - FROZEN_LAG_FRACTION) of it (the reset
# rule's margins, analyzers/explainers/optimizer_state.py). Measured on the dev split (2026-12-01):
# in every checkpoint of the 21 controls all counters are equal (lag 0: 0 warnings); the 8
# planted frozen blocks trail by 90–185 steps at the latest checkpoint (8 of 8 flagged, nanoGPT's
# single ckpt.pt included).
# A block that was never in the optimizer (adapters, LoRA's frozen base, requires_grad=False from
# the start) has no state at all: intentional, an info note.
FROZEN_MIN_LAG_STEPS = 10
FROZEN_LAG_FRACTION = 0.9
MAX_NAMED = 5  # tensors named in one message
# A freeze that keeps no optimizer state reads as intended — except when it is irregular: every
# frozen tensor lies in a block whose other tensors train, and the same tensor trains in other
# blocks (layer 1's attention projections frozen while layers 0 and 2's train and layer 1's MLP
# trains). Intended freezes follow the architecture: whole blocks (the first k layers), a kind
# of tensor in every block (LoRA's base weights, norms, biases), embeddings or a tower. A blind
# set's Llama loop (session 29), whose parameter groups were built by a name filter that missed
# layers.1.self_attn, was an info note "as intended".
_BLOCK_INDEX = re.compile(r"\.(\d+)\.")


def frozen_finding(layers: pd.DataFrame, optimizer_entries: int | None = None) -> Finding | None:
    """Parameters that stopped training: a defect when the optimizer holds state for them (it
    was meant to train them), intentional when it never did."""
    latest = layers[layers["step"] == layers["step"].max()]
    stale = _still_stopped(layers, _stale_counters(latest))
    unchanged, moving_share, windows = _unchanged(layers)
    if stale:
        return _stopped_finding(latest, stale, unchanged, windows)
    stopped = _stopped_changing(layers)
    if stopped is not None:
        return _stopped_changing_finding(*stopped)
    if not unchanged or moving_share < FROZEN_MIN_MOVING_SHARE:
        return None
    counters = latest.set_index("tensor")["adam_step"]
    outside = [t for t in unchanged if t in counters and not np.isfinite(counters[t])]
    optimizer_held = bool(np.isfinite(counters.to_numpy(dtype=float)).any())
    intentional = optimizer_held and len(outside) == len(unchanged)
    # Unmapped state still counts: the HF Trainer builds its optimizer from the parameters with
    # requires_grad only, so a base frozen from the start leaves exactly the moving tensors in it
    # (and breaks the name mapping, which expects every parameter).
    moved = latest["tensor"].nunique() - len(unchanged)
    held_for_moved = (
        not optimizer_held and optimizer_entries is not None and optimizer_entries == moved
    )
    intentional = intentional or held_for_moved
    irregular = intentional and _irregular(unchanged, set(latest["tensor"]) - set(unchanged))
    intentional = intentional and not irregular
    # Unchanged in every window: frozen since before the first checkpoint, the first step known
    # (dated at the last, a blind set's Lightning run frozen from step 0 read "at step 400",
    # session 28).
    step = int(layers["step"].min())
    if irregular:
        detail = (
            "; the optimizer holds no state for them, yet the rest of their block trains and "
            "the same tensors train in the other blocks: a freeze this irregular is rarely "
            "intended (a parameter-group filter or a requires_grad switch that missed them)"
        )
    elif held_for_moved:
        detail = (
            f"; the optimizer holds state for {optimizer_entries} parameters, exactly the tensors "
            "that moved, and none for these: never trained (requires_grad=False from the start), "
            "as intended"
        )
    elif intentional:
        detail = (
            "; the optimizer holds no state for them while it does for the rest: they were never "
            "trained (adapters, a frozen base, requires_grad=False from the start), as intended"
        )
    elif optimizer_held:
        detail = "; the optimizer holds state for them, so they were meant to train"
    else:
        detail = (
            "; the checkpoints hold no optimizer state, so an intentional freeze cannot be told "
            "from a defect"
        )
    return Finding(
        category="frozen_parameters",
        severity="info" if intentional else "warning",
        confidence=0.9 if intentional else 0.8,
        step=step,
        layer=unchanged[0],
        message=(
            f"{len(unchanged)} tensor(s) never changed across {windows} checkpoint window(s) while "
            f"{moving_share:.0%} of tensors trained: {', '.join(unchanged[:MAX_NAMED])}{detail}."
        ),
        evidence={
            "frozen_tensors": unchanged[:20],
            "moving_share": moving_share,
            "windows": windows,
            "intentional": intentional,
        },
        suggestion=(
            "Nothing to do if they are meant to stay fixed."
            if intentional
            else "If these should train, they get no gradient (a router whose output is detached, "
            "a norm configured but never applied, requires_grad=False by mistake); if they are "
            "intentionally frozen, nothing to do."
        ),
        source="checkpoints",
        threshold="‖ΔW‖ = 0 in every window while most tensors moved",
    )


def _block_and_role(name: str) -> tuple[str, str] | None:
    """(block index, the name with it replaced) for a tensor inside a numbered block."""
    found = _BLOCK_INDEX.search(name)
    if found is None:
        return None
    return found.group(1), name[: found.start(1)] + "#" + name[found.end(1) :]


def _irregular(frozen: list[str], moving: set[str]) -> bool:
    """Every frozen tensor sits in a block where other tensors train, and its counterpart
    trains in another block (see _BLOCK_INDEX)."""
    moving_blocks, moving_roles = set(), set()
    for name in moving:
        placed = _block_and_role(name)
        if placed is not None:
            moving_blocks.add(placed[0])
            moving_roles.add(placed[1])
    for name in frozen:
        placed = _block_and_role(name)
        if placed is None or placed[0] not in moving_blocks or placed[1] not in moving_roles:
            return False
    return bool(frozen)


def _unchanged(layers: pd.DataFrame) -> tuple[list[str], float, int]:
    """(tensors with ‖ΔW‖ = 0 in every window, the share that moved, windows); needs two
    checkpoints."""
    deltas = layers.dropna(subset=["delta_norm"])
    if deltas.empty:
        return [], 0.0, 0
    per_tensor = deltas.groupby("tensor")["delta_norm"].max()
    moving_share = float((per_tensor > 0).mean())
    return per_tensor[per_tensor == 0].index.tolist(), moving_share, int(deltas["step"].nunique())


def _stale_counters(latest: pd.DataFrame) -> dict[str, int]:
    """{tensor: its Adam step counter} for the tensors whose counter stopped while most counted
    on (see FROZEN_MIN_LAG_STEPS); empty when none did or there are no counters."""
    counters = latest.set_index("tensor")["adam_step"].astype(float)
    counters = counters[np.isfinite(counters.to_numpy())]
    if counters.empty:
        return {}
    top = float(counters.max())
    lagging = counters[
        (top - counters >= FROZEN_MIN_LAG_STEPS) & (counters < FROZEN_LAG_FRACTION * top)
    ]
    # However few tensors count on: a backbone frozen mid-run while only the head trains leaves
    # most counters behind (a blind set's Lightning run, session 27, frozen at 300 of 800 with
    # only lm_head counting on, was healthy while the rule asked for a counting majority). A
    # counter that still advances is a share of the steps, not a stop (`_still_stopped`).
    if lagging.empty:
        return {}
    return {str(t): int(v) for t, v in lagging.items()}


def _still_stopped(layers: pd.DataFrame, stale: dict[str, int]) -> dict[str, int]:
    """The stale counters of tensors that stopped, leaving out tensors trained on a share of the
    steps all along (multi-task heads taking turns: a healthy-run hunt of session 26 had both
    heads of an alternating run "stopped at step 298"). Such a counter already trailed at the
    checkpoint before and has advanced since; a stopped one stands still, or trailed nothing
    before (stopped within the last window)."""
    steps = sorted(layers["step"].dropna().unique())
    if not stale or len(steps) < 2:
        return stale
    trailing_before = _stale_counters(layers[layers["step"] == steps[-2]])
    return {
        tensor: counter
        for tensor, counter in stale.items()
        if not (tensor in trailing_before and counter > trailing_before[tensor])
    }


def _stopped_finding(
    latest: pd.DataFrame, stale: dict[str, int], unchanged: list[str], windows: int
) -> Finding:
    names = sorted(stale, key=lambda t: (stale[t], t))
    stopped = min(stale.values())
    top = int(latest["adam_step"].max())
    step = int(latest["step"].iloc[0])
    confirmed = [t for t in names if t in unchanged]
    also = (
        f"; {len(confirmed)} of them never changed across {windows} checkpoint window(s)"
        if confirmed
        else ""
    )
    # Dated where they stopped, not where a checkpoint saw it (the card of a layer frozen at step
    # 150 said step 400): the rest's counter maps update counts to this checkpoint's steps.
    since = max(step - (top - stopped) + 1, 0)
    return Finding(
        category="frozen_parameters",
        severity="warning",
        confidence=0.8,
        step=since,
        layer=names[0],
        message=(
            f"{len(names)} tensor(s) stopped training after optimizer step {stopped}: at step "
            f"{step} the optimizer holds their Adam moments but their step counter is "
            f"{stopped} while the rest reached {top}: {', '.join(names[:MAX_NAMED])}{also}."
        ),
        evidence={
            "frozen_tensors": names[:20],
            "adam_step_of_frozen": stopped,
            "adam_step_of_rest": top,
            "frozen_since_step": since,
            "seen_at_step": step,
            "windows": windows,
            "intentional": False,
        },
        suggestion=(
            "They were in the optimizer and then got no gradient: requires_grad turned off "
            "mid-run, a detached branch, a parameter dropped from the graph; if freezing them "
            "was intended, remove them from the optimizer too."
        ),
        source="checkpoints",
        threshold=(
            f"a tensor's Adam step counter ≥ {FROZEN_MIN_LAG_STEPS} behind and < "
            f"{FROZEN_LAG_FRACTION}× the checkpoint's largest"
        ),
    )


# Stopped mid-run, seen in the weights alone (the optimizer state not mapped to names, or kept
# by an optimizer without counters): a tensor that changed and then stayed bit-identical for at
# least FROZEN_MIN_STOPPED_WINDOWS checkpoint windows up to the last, while at least
# FROZEN_MIN_MOVING_SHARE of the tensors changed in each of them. Bit-identical weights get no
# update at all, weight decay included; a blind set's accelerate run (hR run14, session 31) froze
# decoder layer 1 at step 61 of 260 and was healthy: its optimizer.bin maps to no names.
FROZEN_MIN_STOPPED_WINDOWS = 2


def _stopped_changing(layers: pd.DataFrame) -> tuple[list[str], int, list[int], float] | None:
    """(tensors, the checkpoint step by which they stopped, the later checkpoint steps where they
    were unchanged, the smallest share of tensors that moved there), or None."""
    deltas = layers.dropna(subset=["delta_norm"])
    table = deltas.pivot_table(index="tensor", columns="step", values="delta_norm", aggfunc="max")
    steps = sorted(table.columns)
    if len(steps) < FROZEN_MIN_STOPPED_WINDOWS + 1:
        return None
    values = table[steps].to_numpy(dtype=float)
    moved = values > 0
    for first in range(1, len(steps) - FROZEN_MIN_STOPPED_WINDOWS + 1):
        later = moved[:, first:]
        shares = later.mean(axis=0)
        if shares.min() < FROZEN_MIN_MOVING_SHARE:
            continue
        rows = moved[:, first - 1] & ~later.any(axis=1) & np.isfinite(values[:, first:]).all(axis=1)
        if rows.any():
            names = sorted(str(t) for t in table.index[rows])
            return (
                names,
                int(steps[first - 1]),
                [int(s) for s in steps[first:]],
                float(shares.min()),
            )
    return None


def _stopped_changing_finding(
    names: list[str], by_step: int, unchanged_at: list[int], moving_share: float
) -> Finding:
    return Finding(
        category="frozen_parameters",
        severity="warning",
        confidence=0.8,
        step=by_step,
        layer=names[0],
        message=(
            f"{len(names)} tensor(s) stopped training by step {by_step}: they changed up to the "
            f"checkpoint there, then stayed bit-identical at steps "
            f"{', '.join(map(str, unchanged_at))} while at least {moving_share:.0%} of tensors "
            f"trained in each window: {', '.join(names[:MAX_NAMED])}."
        ),
        evidence={
            "frozen_tensors": names[:20],
            "frozen_by_step": by_step,
            "unchanged_at_steps": unchanged_at,
            "moving_share": moving_share,
            "intentional": False,
        },
        suggestion=(
            "They stopped getting updates: requires_grad turned off mid-run, a detached branch, "
            "a parameter dropped from the optimizer; if freezing them was intended, nothing to do."
        ),
        source="checkpoints",
        threshold=(
            f"‖ΔW‖ = 0 in ≥ {FROZEN_MIN_STOPPED_WINDOWS} windows up to the last after a change, "
            f"while ≥ {FROZEN_MIN_MOVING_SHARE:.0%} of tensors moved in each"
        ),
    )
