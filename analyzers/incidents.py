"""Incidents: the loss spikes and divergence that a reader cares about, biggest first."""

from __future__ import annotations

from dataclasses import dataclass

from tscope.analyzers.base import Evidence
from tscope.analyzers.explainers.divergence import loss_rise
from tscope.analyzers.explainers.spikes import is_transient
from tscope.analyzers.signals import loss_series, primary_loss

from tscope.model import Spike
from tscope.model.metric_names import GRAD_NORM

# A gradient-norm excursion the loss did not show ranks below every loss incident: the loss is
# what the reader was paged for (capped: a NaN gradient norm has an astronomic magnitude).
GRAD_ONLY_RANK_FACTOR = 0.01


@dataclass(frozen=True)
class Incident:
    kind: str  # "divergence" | "spike"
    metric: str
    onset_step: int
    peak_step: int
    end_step: int | None
    severity_rank: float  # larger = worse; orders incidents
    spike: Spike | None = None


def incidents(evidence: Evidence) -> list[Incident]:
    """Divergence first, then non-finite spikes, then spikes by magnitude; transient bumps last."""
    run = evidence.run
    loss = primary_loss(run)
    found: list[Incident] = []
    if loss is not None:
        steps, values = loss_series(run, loss)
        onset = loss_rise(steps, values)
        if onset is not None:
            index = onset[0]
            found.append(Incident("divergence", loss, int(steps[index]), int(steps[-1]), None, 1e9))
    loss_spikes = [s for s in evidence.spikes if s.metric == loss]
    for spike in evidence.spikes:
        if spike.metric == GRAD_NORM and not is_transient(run, spike):
            # A gradient blow-up the loss did not (yet) show is still an incident to explain.
            if not any(abs(other.onset_step - spike.onset_step) <= 20 for other in loss_spikes):
                rank = GRAD_ONLY_RANK_FACTOR * min(_finite(spike.magnitude), 100.0)
                found.append(_spike_incident(spike, rank))
            continue
        if loss is not None and spike.metric != loss:
            continue
        rank = _finite(spike.magnitude)
        if spike.nonfinite:
            rank = 1e8
        elif is_transient(run, spike):
            rank = rank * 1e-3
        found.append(_spike_incident(spike, rank))
    found.sort(key=lambda incident: (-incident.severity_rank, incident.onset_step))
    return found


def _finite(number: float) -> float:
    return number if number == number and abs(number) != float("inf") else 0.0


def _spike_incident(spike: Spike, rank: float) -> Incident:
    return Incident(
        "spike", spike.metric, spike.onset_step, spike.peak_step, spike.end_step, rank, spike
    )
