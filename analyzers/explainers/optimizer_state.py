"""adam_epsilon_dominance, optimizer_state_reset, checkpoint_incomplete: the optimizer's side."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.loss_scale import skipped_updates_through
from tscope.analyzers.optimizer_family import ADAM, optimizer_family
from tscope.analyzers.signals import fmt, primary_loss
from tscope.model import Finding, Run
from tscope.model.categories import Category
from tscope.model.checkpoint import CheckpointSnapshot

if TYPE_CHECKING:
    import pandas as pd

# Wortsman et al. 2023 (arXiv 2309.14322): when gradient RMS falls to ~ε, Adam's update shrinks
# and its RMS collapses; Molybog et al. 2023 tie spikes to gradients comparable to ε. Half of a
# tensor's coordinates with √v̂ ≤ ε means ε, not the gradient, sets that tensor's step.
# Counted only over coordinates that ever had a gradient (v > 0): a token absent from the data
# leaves its embedding row at v = 0, which is not ε-dominance (issue 11: 63% of a byte-level
# model's embedding were such rows). Measured (scripts/measure_checkpoint_rules.py): on the 12
# healthy real-producer runs the largest share among coordinates with v > 0 is 0.33 at the latest
# checkpoint (0 warnings; the byte-Llama control's embedding, 64% by the old count, is 0 now).
EPS_DOMINANCE_WARNING = 0.5
# ...unless every ε-dominated coordinate's √v̂ sits at the float-rounding level of the model's
# gradients: ≤ this × the median over its tensors of √RMS(v). There ε dominates nothing real: the
# gradient is zero in exact arithmetic and what is left is float32 rounding (relative 6e-8 of the
# terms summed). Attention key biases are such parameters: softmax ignores a shift common to all
# of a query's logits, which is all a key bias adds (bench/ood block 4, scored once: healthy OPT
# and Phi Trainer runs warned on `k_proj.bias`, √v̂ 4e-12–4e-11 against a model median of 2e-3,
# ratio ~1e-8; Phi's rotary half of that bias, which rotation makes position-dependent, has a real
# gradient). A real ε-dominance (gradients shrunk to ~ε = 1e-8) sits at 1e-5–1e-2 of a model's
# median: 1e-6 leaves a decade or more to each side. Not caught: a residue of earlier, much larger
# gradients (v remembers ~1/(1−β2) steps) can lift that rounding over the bound: the same OPT
# setup with a planted bad batch (1.05e-6) and Phi after a too-hot warm-up (1.5e-6) keep the
# warning, as before.
ROUNDING_LEVEL_RELATIVE = 1e-6
# A context note when at least this share of a tensor's coordinates never had a gradient.
NEVER_UPDATED_NOTE = 0.05
EMBEDDING = re.compile(r"(wte|embed|tok_embeddings)", re.IGNORECASE)
# Adam's step counter trails the global step by more than this fraction (and at least
# RESET_MIN_STEPS): the optimizer state was recreated after a resume. The updates the log shows
# skipped for fp16 overflow are taken off the global step first: a skipped step advances the
# global step but not Adam's counter (a healthy plain-loop fp16 run whose GradScaler started at
# 2^32 skipped its first 15 steps, and every checkpoint's counter trailed by exactly 15: a
# critical "reset" before this).
RESET_FRACTION = 0.9
RESET_MIN_STEPS = 10
# A resume counts as "from" a checkpoint when it lands within this many steps after it.
RESUME_TOLERANCE_STEPS = 2
MAX_NAMED = 5
# Gaps (CheckpointAudit.missing's wording) that change only the data order and random draws
# after a resume, not the updates: a resume from a checkpoint lacking only these is context
# (info). Measured on the accuracy benchmark's spent splits (dev, holdout7–9): every such warning
# was on a stock nanoGPT checkpoint (it saves no RNG state) whose run had another cause (8 of 8
# wrong: weights re-initialised, optimizer or scheduler lost), while the 26 warnings naming
# missing optimizer or scheduler state were all right.
DATA_ORDER_GAPS = ("RNG state", "sampler / dataloader position")


class OptimizerStateExplainer:
    name = "optimizer_state"
    categories: tuple[str, ...] = (
        "adam_epsilon_dominance",
        "checkpoint_incomplete",
        "optimizer_state_reset",
    )
    defines = (
        Category(
            "adam_epsilon_dominance",
            "context",
            "warning",
            "checkpoints",
            "Adam's ε dominating the second moment",
            "Adam's ε dominates √v for many coordinates",
            # A standing condition of the optimizer: heading the findings, it is the first
            # screen's news, not a gradient blip at the same checkpoint (planted-cause hunt,
            # session 26: "the gradient norm spiked at 300, cause undetermined").
            standalone=True,
        ),
        Category(
            "checkpoint_incomplete",
            "context",
            "warning",
            "checkpoints",
            "an incomplete checkpoint",
            "a checkpoint misses files or tensors",
        ),
        Category(
            "optimizer_state_reset",
            "context",
            "warning",
            "checkpoints",
            "an optimizer state reset at a resume",
            "the optimizer's moments or step count restart between checkpoints",
        ),
    )

    def run(self, evidence: Evidence) -> list[Finding]:
        if evidence.checkpoints is None:
            return []
        findings = []
        findings.extend(_eps_dominance(evidence))
        findings.extend(_resets(evidence))
        incomplete = _incomplete(evidence)
        if incomplete is not None:
            findings.append(incomplete)
        return findings


def _eps_dominance(evidence: Evidence) -> list[Finding]:
    assert evidence.checkpoints is not None
    # "The latest checkpoint" needs steps: one without a known step cannot be placed.
    layers = evidence.checkpoints.timed_layers()
    if layers.empty or layers["eps_dominance"].isna().all():
        return []
    latest = layers[layers["step"] == layers["step"].max()]
    findings = []
    dominated = latest[
        (latest["eps_dominance"] >= EPS_DOMINANCE_WARNING) & ~_rounding_level(latest)
    ].sort_values("eps_dominance", ascending=False)
    if not dominated.empty:
        top = dominated.iloc[0]
        findings.append(
            Finding(
                category="adam_epsilon_dominance",
                severity="warning",
                confidence=0.6,
                step=int(top["step"]),
                layer=str(top["tensor"]),
                message=(
                    f"In {len(dominated)} tensor(s) at step {int(top['step'])}, Adam's ε "
                    f"dominates the second moment: {top['eps_dominance']:.0%} of "
                    f"{top['tensor']}'s coordinates that received a gradient have √v̂ ≤ ε "
                    f"(update RMS {fmt(float(top['update_rms']))})."
                ),
                evidence={
                    "tensors": dominated["tensor"].tolist()[:MAX_NAMED],
                    "eps_dominance": [
                        float(v) for v in dominated["eps_dominance"].iloc[:MAX_NAMED]
                    ],
                    "update_rms": float(top["update_rms"]),
                },
                suggestion=(
                    "Lower Adam's ε (e.g. 1e-8 → 1e-15, Wortsman et al. 2023) or check these "
                    "tensors' gradients."
                ),
                source="checkpoints",
                threshold=(
                    f"≥ {EPS_DOMINANCE_WARNING:.0%} of the coordinates with v > 0 have √v̂ ≤ ε, "
                    f"not all at the rounding level (≤ {ROUNDING_LEVEL_RELATIVE:g}× the model's "
                    "median √RMS(v))"
                ),
            )
        )
    never = _never_updated(latest)
    if never is not None:
        findings.append(never)
    return findings


def _rounding_level(latest: pd.DataFrame) -> pd.Series:
    """Per tensor: every ε-dominated coordinate's √v̂ is at the model's rounding level (see
    ROUNDING_LEVEL_RELATIVE); False where unknown (a table written before the column existed)."""
    import numpy as np

    typical = np.sqrt(latest["exp_avg_sq_norm"] / np.sqrt(latest["numel"].clip(lower=1)))
    reference = float(typical[typical > 0].median()) if (typical > 0).any() else float("nan")
    return latest["eps_dominated_max"] <= ROUNDING_LEVEL_RELATIVE * reference


def _never_updated(latest: pd.DataFrame) -> Finding | None:
    """Context: coordinates whose Adam second moment is exactly 0 never had a gradient."""
    if "never_updated_share" not in latest:
        return None
    idle = latest[latest["never_updated_share"] >= NEVER_UPDATED_NOTE].sort_values(
        "never_updated_share", ascending=False
    )
    if idle.empty:
        return None
    top = idle.iloc[0]
    share = float(top["never_updated_share"])
    return Finding(
        category="adam_epsilon_dominance",
        severity="info",
        confidence=0.9,
        step=int(top["step"]),
        layer=str(top["tensor"]),
        message=(
            f"{share:.0%} of {top['tensor']}'s coordinates ({round(share * top['numel'])} of "
            f"{int(top['numel'])}) never received a gradient by step {int(top['step'])}: Adam's "
            "second moment is exactly 0 there"
            + (
                " (in an embedding, the rows of tokens that never occur in the data)"
                if EMBEDDING.search(str(top["tensor"]))
                else ""
            )
            + ". They are left out of the ε-dominance measure; nothing to fix unless those "
            "tokens should occur."
        ),
        evidence={
            "tensors": idle["tensor"].tolist()[:MAX_NAMED],
            "never_updated_share": [float(v) for v in idle["never_updated_share"].iloc[:MAX_NAMED]],
        },
        suggestion=(
            "If these tokens should be in the data, check the tokenizer and the data pipeline; "
            "otherwise nothing to do."
        ),
        source="checkpoints",
        threshold=f"≥ {NEVER_UPDATED_NOTE:.0%} of a tensor's coordinates with v exactly 0",
    )


def _resets(evidence: Evidence) -> list[Finding]:
    assert evidence.checkpoints is not None
    counted = [
        (snapshot, snapshot.info.step, snapshot.optimizer_step)
        for snapshot in evidence.checkpoints.snapshots
        if snapshot.info.step is not None
        and snapshot.optimizer_step is not None
        and snapshot.audit.has_optimizer_moments
    ]
    findings = []
    for snapshot, step, counter in counted:
        updates = step - skipped_updates_through(evidence.run, step)
        behind = updates - counter
        if behind < RESET_MIN_STEPS or counter >= RESET_FRACTION * updates:
            continue
        # The fresh optimizer made the last `counter` updates: the first was update
        # step - counter + 1, where a resume from checkpoint step - counter shows (the logs'
        # resume is dated there too). Dated at the checkpoint's own step, the card's restart
        # point skipped that checkpoint, the last one whose optimizer state was whole (a plain
        # loop's Adagrad reset at a resume from ckpt_1200: "restart from ckpt_800").
        first_fresh = step - counter + 1
        resume = _resume_near(evidence.run, first_fresh)
        if resume is None and _counts_micro_steps(counted):
            break  # the steps count micro-batches: no checkpoint is behind
        family = optimizer_family(evidence)
        findings.append(_reset_finding(snapshot, step, counter, behind, resume, family))
        break  # later checkpoints repeat the same reset
    return findings


def _counts_micro_steps(counted: Sequence[tuple[CheckpointSnapshot, int, int]]) -> bool:
    """Whether every checkpoint's step is the same whole multiple (≥ 2) of Adam's counter: the
    steps (and checkpoint names) count micro-batches under gradient accumulation, not updates.
    A reset leaves a constant offset instead, which no multiple fits at two checkpoints (a
    plain loop accumulating 4 saved ckpt_200/400/600 with counters 50/100/150: a critical
    "reset" before this). With one checkpoint a multiple could be either; the caller has
    already found no resume at the step a reset would have happened."""
    multiples = set()
    for _, step, counter in counted:
        if not step or not counter or step % counter:
            return False
        multiples.add(step // counter)
    return len(multiples) == 1 and min(multiples) >= 2


def _reset_finding(
    snapshot: CheckpointSnapshot,
    step: int,
    counter: int,
    behind: int,
    resume: int | None,
    family: str | None,
) -> Finding:
    first_fresh = step - counter + 1
    owner = "Adam's" if family == ADAM else "the optimizer's"
    lost = "moments and bias correction were" if family == ADAM else "its accumulated state was"
    return Finding(
        category="optimizer_state_reset",
        severity="critical",
        confidence=0.85 if resume is not None else 0.7,
        step=first_fresh,
        layer=None,
        message=(
            f"Checkpoint {snapshot.info.path} is at step {step} but {owner} step counter is "
            f"{counter}: the optimizer state restarted before update {first_fresh}"
            + (f", where the run resumed (step {resume})" if resume is not None else "")
            + f" — {lost} lost (a resume without optimizer state)."
        ),
        evidence={
            "checkpoint": snapshot.info.path,
            "global_step": step,
            "adam_step": counter,
            "steps_behind": behind,
            "resume_step": resume,
        },
        suggestion=(
            "Resume from a checkpoint that has optimizer.pt (and scheduler.pt: the Trainer "
            "loads the optimizer only when both exist), or re-warm the LR after a "
            "deliberate optimizer reset."
        ),
        source="checkpoints",
        threshold=(
            f"optimizer step counter < {RESET_FRACTION}× the global step less the updates skipped for "
            f"overflow, and ≥ {RESET_MIN_STEPS} behind"
        ),
    )


def _resume_near(run: Run, step: int) -> int | None:
    tolerance = _resume_tolerance(run)
    for event in run.events_of("resume"):
        if abs(event.step - step) <= tolerance + 1:
            return event.step
    return None


def _resumed_from(run: Run, snapshot: CheckpointSnapshot) -> int | None:
    if snapshot.info.step is None:
        return None
    tolerance = _resume_tolerance(run)
    for event in run.events_of("resume"):
        if 0 <= event.step - snapshot.info.step <= tolerance:
            return event.step
    return None


def _resume_tolerance(run: Run) -> int:
    """RESUME_TOLERANCE_STEPS, or the loss's logging interval when longer: a resume is seen at the
    first step logged after it (a Trainer logging every 5 steps, resumed from checkpoint-100,
    shows it at 105: a resume from an Adafactor checkpoint missing state went unmatched)."""
    loss = primary_loss(run)
    if loss is None:
        return RESUME_TOLERANCE_STEPS
    steps, _ = run.series(loss)
    interval = int(np.median(np.diff(steps))) if steps.size > 1 else 1
    return max(RESUME_TOLERANCE_STEPS, interval)


def _changes_updates(gap: str) -> bool:
    """Whether a missing piece of resume state changes the updates after a resume (weights,
    moments, step counters, the LR schedule, the loss scale), not only which batches and random
    draws follow (RNG state, the sampler's position)."""
    return not gap.startswith(DATA_ORDER_GAPS)


def _incomplete(evidence: Evidence) -> Finding | None:
    assert evidence.checkpoints is not None
    gaps = [(s, s.audit.missing()) for s in evidence.checkpoints.snapshots]
    gaps = [(s, missing) for s, missing in gaps if missing]
    if not gaps:
        return None
    resumed = [(s, m, _resumed_from(evidence.run, s)) for s, m in gaps]
    used = [(s, m, r) for s, m, r in resumed if r is not None]
    focus, focus_gaps, resume_step = used[0] if used else resumed[0]
    listing = "; ".join(f"{s.info.path}: {', '.join(m)}" for s, m in gaps[:MAX_NAMED])
    message = f"{len(gaps)} checkpoint(s) lack what a faithful resume needs — {listing}."
    changed = bool(used) and any(_changes_updates(gap) for gap in focus_gaps)
    if used:
        message += f" The run did resume from {focus.info.path} (at step {resume_step})."
        if not changed:
            message += (
                " What it lacks decides only which batches and random draws follow (the resume "
                "may replay data), not the updates: context, not a cause of a loss incident."
            )
    return Finding(
        category="checkpoint_incomplete",
        severity="warning" if changed else "info",
        confidence=0.9 if changed else 0.8,
        step=focus.info.step,
        layer=None,
        message=message,
        evidence={
            "checkpoints": [s.info.path for s, _ in gaps][:20],
            "missing": {s.info.path: m for s, m in gaps[:20]},
            "resumed_from": focus.info.path if used else None,
            "resume_step": resume_step if used else None,
            "notes": [note for s, _ in gaps[:3] for note in s.audit.notes][:6],
        },
        suggestion=(
            "Save optimizer, scheduler, GradScaler and per-rank RNG state with every checkpoint "
            "(Trainer: save_only_model=False); a resume from an incomplete checkpoint restarts "
            "schedules and moments."
        ),
        source="checkpoints",
        threshold=(
            "any missing piece of resume state (warning when the run resumed from it and the "
            "piece changes the updates: weights, moments, step counters, schedule, loss scale)"
        ),
    )
