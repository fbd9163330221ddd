"""recurring_loss_spikes: a loss that bumps all the time is one finding, not one note per bump.

The routine bumps of a spiky run (tiny batches, repeated data; spike_judgement.is_texture) are summarised
by their count, size against the level just before each (analyzers/impact.py) and spacing. The
finding is a warning only when the bumps are large against that level; bumps that stand out from
the texture keep their own loss_spike findings.
"""

from __future__ import annotations

import numpy as np

from tscope.analyzers.base import Evidence
from tscope.analyzers.impact import measure_impact, small_against_gain
from tscope.analyzers.signals import fmt, primary_loss
from tscope.analyzers.spike_judgement import is_notable, is_texture
from tscope.model import Finding
from tscope.model.categories import Category

# Recurring bumps are a warning when their median peak is ≥ this × the level just before them.
# Measured on the real logs of shared/realdata (82 files): the median peak ratio of the
# routine bumps is 1.14–1.30× on the 70 modded-nanogpt runs and 2.16× on baize's batch-2 LoRA run,
# the largest of any healthy log; 3× leaves a margin over it (0 false warnings on those logs).
RECURRING_WARNING_RATIO = 3.0


class RecurringSpikesExplainer:
    name = "recurring"
    categories: tuple[str, ...] = ("recurring_loss_spikes",)
    defines = (
        Category(
            "recurring_loss_spikes",
            "symptom",
            "info",
            "logs",
            "a loss that bumps all the time",
            "many routine loss bumps summarised: count, size against the level before, spacing",
            symptom_order=40,
        ),
    )

    def run(self, evidence: Evidence) -> list[Finding]:
        run = evidence.run
        loss = primary_loss(run)
        if loss is None or not is_texture(run, loss, evidence.spikes):
            return []
        routine = [
            s
            for s in evidence.spikes
            if s.metric == loss and not is_notable(run, s, evidence.spikes)
        ]
        if len(routine) < 3:
            return []
        impacts = [measure_impact(run, s.onset_step, s.end_step) for s in routine]
        ratios = np.array([i.ratio for i in impacts if np.isfinite(i.ratio)])
        excess = np.array([i.excess_nats for i in impacts if np.isfinite(i.excess_nats)])
        if ratios.size == 0:
            return []
        peaks = np.array([s.peak_step for s in routine])
        spacing = float(np.median(np.diff(peaks))) if peaks.size > 1 else 0.0
        median_ratio = float(np.median(ratios))
        largest = routine[int(np.argmax([i.excess_nats for i in impacts]))]
        # Large against the level, and not small against what the run gained (impact.py's
        # MIN_EXCESS_OF_GAIN): an MSE objective's batch means are heavy-tailed, 3-10x one-batch
        # peaks at a level 40x under its start are routine (a healthy-run hunt, session 25).
        small = sum(small_against_gain(i) for i in impacts) > len(impacts) / 2
        severity = "warning" if median_ratio >= RECURRING_WARNING_RATIO and not small else "info"
        return [
            Finding(
                category="recurring_loss_spikes",
                severity=severity,
                confidence=1.0,  # a count, not a guess
                step=int(peaks[0]),
                layer=None,
                message=(
                    f"{loss} bumps all the time: {len(routine)} spikes from step {int(peaks[0])} "
                    f"to {int(peaks[-1])}, one every {fmt(spacing)} steps (median); their peaks "
                    f"are a median {fmt(median_ratio)}× (+{fmt(float(np.median(excess)))} nats) "
                    f"the level just before them, the largest +{fmt(float(excess.max()))} nats "
                    f"at step {largest.peak_step}."
                ),
                evidence={
                    "count": len(routine),
                    "first_step": int(peaks[0]),
                    "last_step": int(peaks[-1]),
                    "median_spacing_steps": spacing,
                    "median_peak_ratio": median_ratio,
                    "median_excess_nats": float(np.median(excess)),
                    "max_excess_nats": float(excess.max()),
                    "spike_ids": [s.id for s in routine],
                },
                suggestion=(
                    "Routine bumps come from small batches or repeated/ordered data. If they are "
                    "large, raise the batch size (or gradient accumulation), shuffle the data, or "
                    "lower the learning rate; check that the same steps bump in every run."
                ),
                threshold=(
                    f"≥ 3 spikes, more than 1 per 1,000 logged points; warning at a median peak "
                    f"≥ {RECURRING_WARNING_RATIO}× the level before"
                ),
            )
        ]
