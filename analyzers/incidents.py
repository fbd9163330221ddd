"""Incidents: the loss spikes and divergence that a reader cares about, biggest impact first.

Every incident carries its impact on the training loss (analyzers/impact.py); the order is the
impact's (non-finite first, then the peak excess in nats, then the area), never a per-kind weight.
A gradient-norm excursion the loss did not show has a small impact on the loss, so it sorts below
the loss incidents by the same measure.
"""

from __future__ import annotations

from dataclasses import dataclass

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.divergence import loss_rise, starts_nonfinite
from tscope.analyzers.impact import Impact, impact_order, impact_severity, measure_impact
from tscope.analyzers.signals import loss_series, primary_loss
from tscope.analyzers.spike_judgement import is_transient, reaction_end
from tscope.model import Spike
from tscope.model.metric_names import GRAD_NORM

# A gradient-norm spike and a loss spike starting within this many steps are one incident (the
# loss one describes it). A gradient-only excursion's impact is measured on the loss up to
# spike_judgement.REACTION_POINTS logged points after its peak (`reaction_end`).
SAME_INCIDENT_STEPS = 20


@dataclass(frozen=True)
class Incident:
    kind: str  # "divergence" | "spike"
    metric: str
    onset_step: int
    peak_step: int
    end_step: int | None
    impact: Impact
    spike: Spike | None = None
    # A divergence whose first point is already NaN/Inf: no climb before it (divergence.py).
    abrupt_nonfinite: bool = False

    @property
    def severity(self) -> str:
        return impact_severity(self.impact)


def incidents(evidence: Evidence) -> list[Incident]:
    """Every loss incident (and unmatched gradient-norm blow-up), largest impact first."""
    run = evidence.run
    loss = primary_loss(run)
    found: list[Incident] = []
    if loss is not None:
        steps, values = loss_series(run, loss)
        onset = loss_rise(steps, values)
        if onset is not None:
            start = int(steps[onset[0]])
            impact = measure_impact(run, start, None)
            found.append(
                Incident(
                    "divergence",
                    loss,
                    start,
                    int(steps[-1]),
                    None,
                    impact,
                    abrupt_nonfinite=starts_nonfinite(values, onset[0]),
                )
            )
    loss_spikes = [s for s in evidence.spikes if s.metric == loss]
    for spike in evidence.spikes:
        if spike.metric == GRAD_NORM and not is_transient(run, spike):
            # A gradient blow-up the loss did not (yet) show is still an incident to explain.
            if not any(
                abs(other.onset_step - spike.onset_step) <= SAME_INCIDENT_STEPS
                for other in loss_spikes
            ):
                end = reaction_end(run, spike)
                found.append(_spike_incident(spike, measure_impact(run, spike.onset_step, end)))
            continue
        if loss is not None and spike.metric != loss:
            continue
        found.append(_spike_incident(spike, measure_impact(run, spike.onset_step, spike.end_step)))
    found = _fold_into_divergence(found)
    found.sort(key=lambda incident: (*impact_order(incident.impact), incident.onset_step))
    return found


def _fold_into_divergence(found: list[Incident]) -> list[Incident]:
    """A loss spike that never recovers while the loss diverges is the divergence itself: one
    event, described as the divergence (its findings link to it by step)."""
    divergence = next((i for i in found if i.kind == "divergence"), None)
    if divergence is None:
        return found
    folded = [
        i
        for i in found
        if i.kind == "spike" and i.end_step is None and i.metric == divergence.metric
    ]
    if not folded:
        return found
    return [i for i in found if not any(i is other for other in folded)]


def _spike_incident(spike: Spike, impact: Impact) -> Incident:
    return Incident(
        "spike", spike.metric, spike.onset_step, spike.peak_step, spike.end_step, impact, spike
    )
