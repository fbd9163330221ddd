"""The spike story: for each incident, which signals moved first and by how many steps."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.baseline import BASELINE_WINDOW_POINTS, robust_baseline
from tscope.analyzers.categories import story_signal
from tscope.analyzers.incidents import Incident
from tscope.analyzers.signals import fmt
from tscope.model import Finding, StoryEvent
from tscope.model.categories import ALERT_SEVERITIES
from tscope.model.metric_names import GRAD_NORM, LOSS_SCALE

# How far back (in logged loss points) a precursor may lie and still belong to the incident.
LOOKBACK_POINTS = 2 * BASELINE_WINDOW_POINTS
# A precursor on the gradient norm: at least this many robust sigmas above its own baseline, and
# staying there (gaps of at most PRECURSOR_GAP_POINTS) until the loss moves. 3σ is the usual
# "credible, not yet alarming" bar; the spike detectors use 6σ for alarms.
PRECURSOR_SIGMA = 3.0
PRECURSOR_GAP_POINTS = 2
# Only the biggest incidents get a story: the report is read in a minute.
MAX_STORIES = 5


def build_story(
    evidence: Evidence, incidents: list[Incident], findings: list[Finding]
) -> list[StoryEvent]:
    story: list[StoryEvent] = []
    alerted = {f.spike_id for f in findings if f.severity in ALERT_SEVERITIES}
    for incident in incidents[:MAX_STORIES]:
        if incident.spike is not None and incident.spike.id not in alerted:
            continue  # informational bumps tell no story
        story.extend(_incident_story(evidence, incident, findings))
    return story


def _window_start(evidence: Evidence, incident: Incident) -> int:
    steps, _ = evidence.run.series(incident.metric)
    position = int(np.searchsorted(steps, incident.onset_step))
    return int(steps[max(0, position - LOOKBACK_POINTS)])


def _incident_story(
    evidence: Evidence, incident: Incident, findings: list[Finding]
) -> list[StoryEvent]:
    spike_id = incident.spike.id if incident.spike else None
    start = _window_start(evidence, incident)
    events: list[StoryEvent] = []

    def add(step: int, signal: str, description: str) -> None:
        events.append(
            StoryEvent(step, signal, description, None, spike_id, incident.peak_step - step)
        )

    for finding in findings:
        signal = story_signal(finding.category)
        if signal and finding.step is not None and start <= finding.step <= incident.peak_step:
            add(finding.step, signal, finding.message.split(":")[0].split(". ")[0])
    grad = _grad_norm_precursor(evidence, incident, start)
    if grad is not None:
        add(*grad)
    scale = _loss_scale_drop(evidence, start, incident.peak_step)
    if scale is not None:
        add(*scale)
    # Only the first upward regime shift before the onset: the earliest credible drift.
    drifts = [
        cp
        for cp in evidence.change_points
        if cp.after_mean > cp.before_mean
        and cp.metric == incident.metric
        and start <= cp.step < incident.onset_step
    ]
    if drifts:
        cp = min(drifts, key=lambda c: c.step)
        text = (
            f"{cp.detector}: {cp.metric} level rises {fmt(cp.before_mean)} → {fmt(cp.after_mean)}"
        )
        add(cp.step, "loss_drift", text)
    if incident.kind == "divergence":
        add(incident.onset_step, "loss", f"{incident.metric} leaves its best level for good")
    else:
        spike = incident.spike
        assert spike is not None  # spike incidents always carry their spike
        add(
            spike.onset_step,
            "loss",
            f"{spike.metric} rises above its baseline {fmt(spike.baseline)}",
        )
        if spike.peak_step != spike.onset_step:
            add(spike.peak_step, "loss", f"{spike.metric} peaks at {fmt(spike.peak_value)}")
    nonfinite = _first_nonfinite(evidence, incident)
    if nonfinite is not None:
        add(nonfinite, "nonfinite", f"{incident.metric} becomes NaN/Inf")
    events.sort(key=lambda event: (event.step, event.signal))
    return events


def _grad_norm_precursor(
    evidence: Evidence, incident: Incident, start: int
) -> tuple[int, str, str] | None:
    steps, values = evidence.run.series(GRAD_NORM)
    if steps.size == 0:
        return None
    z = robust_baseline(values).zscores(values)
    in_window = np.flatnonzero((steps >= start) & (steps <= incident.peak_step))
    with np.errstate(invalid="ignore"):
        hot = (np.isfinite(z[in_window]) & (z[in_window] >= PRECURSOR_SIGMA)) | ~np.isfinite(
            values[in_window]
        )
    elevated = in_window[hot].tolist()
    if not elevated:
        return None
    # The elevated stretch that reaches the loss onset: walk back over small gaps.
    onset_position = int(np.searchsorted(steps, incident.onset_step))
    reaching = [i for i in elevated if i <= max(onset_position, elevated[0])]
    first = reaching[-1] if reaching else elevated[0]
    for index in reversed(reaching[:-1]):
        if first - index > PRECURSOR_GAP_POINTS:
            break
        first = index
    value = values[first]
    return (
        int(steps[first]),
        "grad_norm",
        f"grad norm {fmt(float(value))}, {fmt(float(z[first]))} robust σ above its baseline",
    )


def _loss_scale_drop(evidence: Evidence, start: int, end: int) -> tuple[int, str, str] | None:
    steps, scales = evidence.run.series(LOSS_SCALE)
    keep = (steps >= start) & (steps <= end)
    steps, scales = steps[keep], scales[keep]
    drops: np.ndarray = (
        np.flatnonzero(scales[1:] < scales[:-1]) + 1 if scales.size > 1 else np.empty(0, int)
    )
    if len(drops) == 0:
        return None
    first = int(drops[0])
    return int(steps[first]), "loss_scale", f"loss scale drops to {fmt(float(scales[first]))}"


def _first_nonfinite(evidence: Evidence, incident: Incident) -> int | None:
    steps, values = evidence.run.series(incident.metric)
    bad = np.flatnonzero((steps >= incident.onset_step) & ~np.isfinite(values))
    return int(steps[bad[0]]) if bad.size else None
