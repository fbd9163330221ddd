"""adam_epsilon_dominance, optimizer_state_reset, checkpoint_incomplete: the optimizer's side."""

from __future__ import annotations

from tscope.analyzers.base import Evidence
from tscope.analyzers.signals import fmt

from tscope.model import Finding, Run
from tscope.model.checkpoint import CheckpointSnapshot

# Wortsman et al. 2023 (arXiv 2309.14322): when gradient RMS falls to ~ε, Adam's update shrinks
# and its RMS collapses; Molybog et al. 2023 tie spikes to gradients comparable to ε. Half of a
# tensor's coordinates with √v̂ ≤ ε means ε, not the gradient, sets that tensor's step.
EPS_DOMINANCE_WARNING = 0.5
# Adam's step counter trails the global step by more than this fraction (and at least
# RESET_MIN_STEPS): the optimizer state was recreated after a resume.
RESET_FRACTION = 0.9
RESET_MIN_STEPS = 10
# A resume counts as "from" a checkpoint when it lands within this many steps after it.
RESUME_TOLERANCE_STEPS = 2
MAX_NAMED = 5


class OptimizerStateExplainer:
    name = "optimizer_state"
    categories: tuple[str, ...] = (
        "adam_epsilon_dominance",
        "checkpoint_incomplete",
        "optimizer_state_reset",
    )  # registered in tscope/model/categories.py

    def run(self, evidence: Evidence) -> list[Finding]:
        if evidence.checkpoints is None:
            return []
        findings = []
        eps = _eps_dominance(evidence)
        if eps is not None:
            findings.append(eps)
        findings.extend(_resets(evidence))
        incomplete = _incomplete(evidence)
        if incomplete is not None:
            findings.append(incomplete)
        return findings


def _eps_dominance(evidence: Evidence) -> Finding | None:
    assert evidence.checkpoints is not None
    layers = evidence.checkpoints.layers
    if layers.empty or layers["eps_dominance"].isna().all():
        return None
    latest = layers[layers["step"] == layers["step"].max()]
    dominated = latest[latest["eps_dominance"] >= EPS_DOMINANCE_WARNING].sort_values(
        "eps_dominance", ascending=False
    )
    if dominated.empty:
        return None
    top = dominated.iloc[0]
    return Finding(
        category="adam_epsilon_dominance",
        severity="warning",
        confidence=0.6,
        step=int(top["step"]),
        layer=str(top["tensor"]),
        message=(
            f"In {len(dominated)} tensor(s) at step {int(top['step'])}, Adam's ε dominates the "
            f"second moment: {top['eps_dominance']:.0%} of {top['tensor']}'s coordinates have "
            f"√v̂ ≤ ε (update RMS {fmt(float(top['update_rms']))})."
        ),
        evidence={
            "tensors": dominated["tensor"].tolist()[:MAX_NAMED],
            "eps_dominance": [float(v) for v in dominated["eps_dominance"].iloc[:MAX_NAMED]],
            "update_rms": float(top["update_rms"]),
        },
        suggestion="Lower Adam's ε (e.g. 1e-8 → 1e-15, Wortsman et al. 2023) or check these tensors' gradients.",
        source="checkpoints",
        threshold=f"≥ {EPS_DOMINANCE_WARNING:.0%} of coordinates with √v̂ ≤ ε",
    )


def _resets(evidence: Evidence) -> list[Finding]:
    assert evidence.checkpoints is not None
    findings = []
    for snapshot in evidence.checkpoints.snapshots:
        step, counter = snapshot.info.step, snapshot.optimizer_step
        if step is None or counter is None or not snapshot.audit.has_optimizer_moments:
            continue
        behind = step - counter
        if behind >= RESET_MIN_STEPS and counter < RESET_FRACTION * step:
            resume = _resume_near(evidence.run, step - counter)
            findings.append(
                Finding(
                    category="optimizer_state_reset",
                    severity="critical",
                    confidence=0.85 if resume is not None else 0.7,
                    step=step - counter,
                    layer=None,
                    message=(
                        f"Checkpoint {snapshot.info.path} is at step {step} but Adam's step counter is "
                        f"{counter}: the optimizer state restarted around step {step - counter}"
                        + (f", where the run resumed (step {resume})" if resume is not None else "")
                        + " — moments and bias correction were lost (a resume without optimizer state)."
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
                    threshold=f"Adam step < {RESET_FRACTION}× the global step and ≥ {RESET_MIN_STEPS} behind",
                )
            )
    return findings[:1]  # later checkpoints repeat the same reset


def _resume_near(run: Run, step: int) -> int | None:
    for event in run.events_of("resume"):
        if abs(event.step - step) <= RESUME_TOLERANCE_STEPS + 1:
            return event.step
    return None


def _resumed_from(run: Run, snapshot: CheckpointSnapshot) -> int | None:
    if snapshot.info.step is None:
        return None
    for event in run.events_of("resume"):
        if 0 <= event.step - snapshot.info.step <= RESUME_TOLERANCE_STEPS:
            return event.step
    return None


def _incomplete(evidence: Evidence) -> Finding | None:
    assert evidence.checkpoints is not None
    gaps = [(s, s.audit.missing()) for s in evidence.checkpoints.snapshots]
    gaps = [(s, missing) for s, missing in gaps if missing]
    if not gaps:
        return None
    resumed = [(s, m, _resumed_from(evidence.run, s)) for s, m in gaps]
    used = [(s, m, r) for s, m, r in resumed if r is not None]
    focus, _, resume_step = used[0] if used else resumed[0]
    listing = "; ".join(f"{s.info.path}: {', '.join(m)}" for s, m in gaps[:MAX_NAMED])
    message = f"{len(gaps)} checkpoint(s) lack what a faithful resume needs — {listing}."
    if used:
        message += f" The run did resume from {focus.info.path} (at step {resume_step})."
    return Finding(
        category="checkpoint_incomplete",
        severity="warning" if used else "info",
        confidence=0.9 if used else 0.8,
        step=focus.info.step,
        layer=None,
        message=message,
        evidence={
            "checkpoints": [s.info.path for s, _ in gaps][:20],
            "missing": {s.info.path: m for s, m in gaps[:20]},
            "resumed_from": focus.info.path if used else None,
            "notes": [note for s, _ in gaps[:3] for note in s.audit.notes][:6],
        },
        suggestion=(
            "Save optimizer, scheduler, GradScaler and per-rank RNG state with every checkpoint "
            "(Trainer: save_only_model=False); a resume from an incomplete checkpoint restarts "
            "schedules and moments."
        ),
        source="checkpoints",
        threshold="any missing piece of resume state (warning when the run resumed from it)",
    )
