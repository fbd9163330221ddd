"""loss_spike, grad_norm_spike and nan_loss: the incidents themselves, one finding each.

Whether a spike is worth a warning is analyzers/spike_judgement.py's (the other explainers and
the incident builder ask it too)."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.baseline import BASELINE_WINDOW_POINTS
from tscope.analyzers.explainers.overfitting import Overfitting, overfitting_onset
from tscope.analyzers.impact import eval_held_text, measure_impact
from tscope.analyzers.signals import (
    fmt,
    hides_nonfinite_loss,
    loss_series,
    primary_loss,
    spike_size,
)
from tscope.analyzers.spike_judgement import (
    is_notable,
    is_texture,
    is_transient,
    loss_reacts,
    spike_points,
)
from tscope.model import Finding, Run, Spike
from tscope.model.categories import Category
from tscope.model.metric_names import EVAL_LOSS, GRAD_NORM, is_loss_like

SPIKE_THRESHOLD_TEXT = (
    "≥ 6 robust σ above the median of the previous 50 points (robust_z) and/or ≥ 7σ from the mean "
    "of the previous 1,000 (OLMo 2 spike score)"
)


class SpikeExplainer:
    name = "spikes"
    categories: tuple[str, ...] = (
        "loss_spike",
        "grad_norm_spike",
        "nan_loss",
    )
    defines = (
        Category(
            "nan_loss",
            "symptom",
            "critical",
            "logs",
            "a NaN/Inf loss",
            "the logged loss becomes NaN/Inf (also when the Trainer hid it)",
            symptom_order=20,
        ),
        Category(
            "loss_spike",
            "symptom",
            "warning",
            "logs",
            "a loss spike",
            "the loss rises far above its recent baseline",
            symptom_order=30,
        ),
        Category(
            "grad_norm_spike",
            "symptom",
            "warning",
            "logs",
            "a gradient-norm spike",
            "the gradient norm jumps far above its recent baseline",
            symptom_order=50,
        ),
    )

    def run(self, evidence: Evidence) -> list[Finding]:
        findings = []
        for spike in evidence.spikes:
            notable = is_notable(evidence.run, spike, evidence.spikes)
            if is_loss_like(spike.metric):
                if not notable and is_texture(evidence.run, spike.metric, evidence.spikes):
                    continue  # one of the run's routine bumps: the recurring-spikes finding
                findings.append(_loss_spike(evidence.run, spike, notable))
            elif spike.metric == GRAD_NORM:
                # A gradient-norm jump matters when the loss reacts or it goes non-finite; a
                # level that rises and stays is growth (context, OLMo 2), not an incident.
                reacts = loss_reacts(evidence.run, spike, evidence.spikes)
                skipped = _skipped_step(spike) and not reacts
                linked = (spike.nonfinite and not skipped) or reacts
                findings.append(_grad_norm_spike(evidence.run, spike, notable and linked, skipped))
        findings.extend(_nan_losses(evidence.run))
        return findings


def spike_confidence(spike: Spike) -> float:
    """More detectors agreeing and a larger magnitude make the alarm more certain."""
    agreement = 0.15 * len(spike.detectors)
    size = 0.1 * min(spike.magnitude / 10.0, 2.0) if np.isfinite(spike.magnitude) else 0.2
    return round(min(0.95, 0.45 + agreement + size), 2)


def _evidence(run: Run, spike: Spike) -> dict[str, object]:
    return {
        "baseline": spike.baseline,
        "peak_value": spike.peak_value,
        "peak_to_baseline": spike.peak_value / spike.baseline if spike.baseline else None,
        # The score compared with SPIKE_THRESHOLD_TEXT, named by its detector (None: NaN/Inf).
        f"{spike.alarm_detector or 'robust_z'}_score": spike.alarm_score,
        "nonfinite": spike.nonfinite,
        "onset_step": spike.onset_step,
        "peak_step": spike.peak_step,
        "end_step": spike.end_step,
        "points_above_baseline": spike_points(run, spike),
        "detectors": list(spike.detectors),
    }


def peak_text(spike: Spike) -> str:
    return "a non-finite value" if spike.nonfinite else fmt(spike.peak_value)


def _size_text(spike: Spike) -> str:
    """ "(8.27 robust σ) " after the peak; nothing for NaN/Inf, which the peak already names."""
    return "" if spike.nonfinite else f"({spike_size(spike)}) "


def _recovery_text(spike: Spike, points: int | None = None) -> str:
    if spike.end_step is None:
        return "and has not recovered by the end of the log"
    if points is not None and points > BASELINE_WINDOW_POINTS:
        # Longer than the detectors' baseline window: a setback the run had to re-learn.
        return (
            f"and took {spike.end_step - spike.onset_step} steps ({points} logged points) to come "
            f"back, by step {spike.end_step}: a setback, not a transient spike"
        )
    return f"and recovered by step {spike.end_step}"


def _loss_spike(run: Run, spike: Spike, notable: bool) -> Finding:
    transient = is_transient(run, spike)
    impact = measure_impact(run, spike.onset_step, spike.end_step, spike.metric)
    overfit = _overfitting_behind(run, spike)
    # The spike's own severity stays warning at most: a critical impact (NaN/Inf, the untrained
    # level) is reported by nan_loss, loss_divergence or a critical resume_discontinuity, which
    # also name the cause; a critical spike would outrank the LR jump that caused it. An eval-loss
    # rise that overfitting explains is that finding's evidence, not a second incident.
    severity = "warning" if notable and overfit is None else "info"
    peak = peak_text(spike)
    message = (
        f"{spike.metric} spiked from {fmt(spike.baseline)} to {peak} at step {spike.peak_step} "
        f"{_size_text(spike)}{_recovery_text(spike, impact.points)}."
    )
    if impact.data_changed:
        message += eval_held_text(run, spike.onset_step, spike.end_step)
    if overfit is not None:
        message += (
            f" It is the eval loss rising from its best (step {overfit.best_step}) while the "
            f"train loss kept falling: the overfitting finding, not a spike of its own."
        )
    if transient:
        message += " A transient bump: back to baseline within two logged points."
    if impact.returned_to_initial:
        message += (
            f" The loss went back to the run's first logged level ({fmt(impact.initial)}, "
            f"the peak {fmt(impact.peak)}): the level of a model that has learned nothing, as if "
            "the weights were lost."
        )
    return Finding(
        category="loss_spike",
        severity=severity,
        confidence=spike_confidence(spike),
        step=spike.peak_step,
        layer=None,
        message=message,
        evidence={**_evidence(run, spike), "impact": impact.as_dict()},
        suggestion=(
            "See the overfitting finding: keep the checkpoint of the best evaluation."
            if overfit is not None
            else "Find what changed at the onset: the story shows which signal moved first. If "
            f"nothing else moved, inspect the batch of step {spike.peak_step} (and the few before "
            "it) for corrupted or repeated samples, and skip it on restart."
        ),
        spike_id=spike.id,
        threshold=SPIKE_THRESHOLD_TEXT,
    )


def _overfitting_behind(run: Run, spike: Spike) -> Overfitting | None:
    """The run's overfitting when `spike` is its eval loss rising after the best evaluation."""
    if spike.metric != EVAL_LOSS or spike.nonfinite:
        return None
    found = overfitting_onset(run)
    if found is None or spike.onset_step < found.best_step:
        return None
    return found


def _skipped_step(spike: Spike) -> bool:
    """A non-finite gradient norm that is finite again afterwards: the step was skipped (the
    fp16 loss scaler, DeepSpeed's overflow check), since applying it would have made the weights
    non-finite for good (signals.loss_series)."""
    return spike.nonfinite and spike.end_step is not None


def _grad_norm_spike(run: Run, spike: Spike, notable: bool, skipped: bool = False) -> Finding:
    message = (
        f"The gradient norm jumped from {fmt(spike.baseline)} to {peak_text(spike)} at "
        f"step {spike.peak_step} {_size_text(spike)}{_recovery_text(spike)}."
    )
    suggestion = (
        "Gradient-norm spikes often precede loss spikes (OLMo 2). Check that clipping is on "
        "(max_grad_norm) and whether the loss follows; a jump that stays is growth to watch."
    )
    if skipped:
        message += (
            " Finite again right after, and the loss did not react: a step skipped for "
            "overflowing gradients, which fp16 loss scaling does in the first steps and whenever "
            "it raises the scale."
        )
        suggestion = (
            "Nothing to do for an occasional skip. Many in a row mean the loss scale keeps "
            "falling: log it, or train in bf16."
        )
    return Finding(
        category="grad_norm_spike",
        severity="warning" if notable else "info",
        confidence=spike_confidence(spike),
        step=spike.peak_step,
        layer=None,
        message=message,
        evidence=_evidence(run, spike),
        suggestion=suggestion,
        spike_id=spike.id,
        threshold=SPIKE_THRESHOLD_TEXT,
    )


def _nan_losses(run: Run) -> list[Finding]:
    loss = primary_loss(run)
    if loss is None:
        return []
    steps, values = loss_series(run, loss)
    bad = np.flatnonzero(~np.isfinite(values))
    if bad.size == 0:
        return []
    first = int(bad[0])
    finite_before = values[:first][np.isfinite(values[:first])]
    return [
        Finding(
            category="nan_loss",
            severity="critical",
            confidence=0.99,
            step=int(steps[first]),
            layer=None,
            message=(
                f"{loss} became non-finite at step {int(steps[first])}{_hidden_note(run, loss, first)}; "
                f"{bad.size} of {values.size} logged values are NaN/Inf."
            ),
            evidence={
                "first_nonfinite_step": int(steps[first]),
                "nonfinite_points": int(bad.size),
                "logged_points": int(values.size),
                "last_finite_value": float(finite_before[-1]) if finite_before.size else None,
            },
            suggestion=(
                "Restart from the last checkpoint before this step with a lower learning rate or "
                "tighter clipping, and set logging_nan_inf_filter=False so the next NaN is logged."
            ),
            threshold="any NaN/Inf in the logged loss",
        )
    ]


def _hidden_note(run: Run, loss: str, index: int) -> str:
    logged = float(run.series(loss)[1][index])
    if not np.isfinite(logged):
        return ""
    if hides_nonfinite_loss(run):
        return (
            f" (logged as {fmt(logged)}, but the gradient norm of that step is non-finite: the "
            "Trainer's logging_nan_inf_filter hid the NaN)"
        )
    # Another loop logs the real loss: that step's was still a number, the gradient no longer.
    return (
        f" (counted from there: the loss logged {fmt(logged)}, but the gradient norm of that "
        "step and every later one is non-finite)"
    )
