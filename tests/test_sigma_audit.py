"""Issue 11 design item 5: the σ in every message is the one compared with the threshold.

Every finding of the fixture runs (real Trainer runs, the LR sweep, the layer TensorBoard runs)
whose message prints a σ is audited against an independent recomputation: the detector named by
the spike (robust rolling z or OLMo 2's spike score) is run again on the raw series, and the
printed number must be its largest score inside the spike's window — the score that crossed the
detector's threshold — and at least that threshold. A resume's loss σ is recomputed from the
points before the resume the same way. A σ printed by any other finding fails the audit until it
is covered here.
"""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

from tscope.analyzers import one_step_breaks
from tscope.analyzers.baseline import robust_baseline
from tscope.analyzers.detectors.robust_z import ROBUST_Z_ALARM_SIGMA, RobustZDetector
from tscope.analyzers.detectors.spike_score import SPIKE_SCORE_SIGMA, SpikeScoreDetector
from tscope.analyzers.explainers import bad_batch_logs
from tscope.analyzers.explainers.resume import RESUME_LOSS_SIGMA, _loss_jump
from tscope.analyzers.signals import fmt, loss_series
from tscope.model.metric_names import is_loss_like
from tscope.pipeline import analyze_run

DATA = Path(__file__).resolve().parents[1] / "fixtures" / "data"
RUNS = sorted(
    [p for p in (DATA / "trainer").iterdir() if p.is_dir()]
    + [p for p in (DATA / "sweep").iterdir() if p.is_dir()]
    + [p for p in (DATA / "layer_tb").iterdir() if p.is_dir()]
)
SIGMA_TEXT = re.compile(r"(-?[\d.]+(?:e[+-]?\d+)?) (robust σ|σ, OLMo 2 spike score)")
DETECTORS = {
    "robust σ": (RobustZDetector(), ROBUST_Z_ALARM_SIGMA),
    "σ, OLMo 2 spike score": (SpikeScoreDetector(), SPIKE_SCORE_SIGMA),
}


def _spike_score(run, spike, spikes, unit: str) -> float:  # type: ignore[no-untyped-def]
    """The detector's largest finite score from the spike's onset to its recovery or to the next
    spike on the same series, whichever comes first (a long excursion can hold a second spike)."""
    detector, _ = DETECTORS[unit]
    metric = spike.metric
    steps, values = loss_series(run, metric) if is_loss_like(metric) else run.series(metric)
    detection = detector.detect(values, robust_baseline(values))
    later = [s.onset_step for s in spikes if s.metric == metric and s.onset_step > spike.peak_step]
    end = spike.end_step if spike.end_step is not None else int(steps[-1]) + 1
    last = min([end, *later])
    scores = [
        a.score
        for a in detection.alarms
        if spike.onset_step <= steps[a.index] < max(last, spike.peak_step + 1)
        and np.isfinite(a.score)
    ]
    assert scores, (metric, spike)
    return float(max(scores))


def _break_sigma(run, step: int) -> float:  # type: ignore[no-untyped-def]
    """bad_batch_logs' σ (one_step_breaks.py) recomputed from its definition: the point's excess over the median of
    TREND_POINTS points each side, over 1.4826 × the MAD of the other points' excesses within
    NOISE_POINTS (its own neighbours left out)."""
    steps, values = loss_series(run, "train/loss")
    keep = np.isfinite(values)
    steps, values = steps[keep], values[keep]
    half = one_step_breaks.TREND_POINTS

    def excess(j: int) -> float:
        around = np.r_[values[max(0, j - half) : j], values[j + 1 : j + 1 + half]]
        return float(values[j] - np.median(around))

    i = int(np.searchsorted(steps, step))
    window = one_step_breaks.NOISE_POINTS
    others = [
        excess(j)
        for j in range(max(0, i - window), min(values.size, i + 1 + window))
        if abs(j - i) > 1
    ]
    noise = 1.4826 * float(np.median(np.abs(np.asarray(others) - np.median(others))))
    return excess(i) / noise


@pytest.mark.parametrize("path", RUNS, ids=[p.name for p in RUNS])
def test_every_printed_sigma_is_the_score_compared_with_the_threshold(path: Path) -> None:
    case, run = analyze_run(path, read_weights=False)
    spikes = {s.id: s for s in case.spikes}
    audited = 0
    for finding in case.findings:
        for number, unit in SIGMA_TEXT.findall(finding.message):
            if finding.category in ("loss_spike", "grad_norm_spike"):
                spike = spikes[finding.spike_id]
                score = _spike_score(run, spike, case.spikes, unit)
                threshold = DETECTORS[unit][1]
            elif finding.category == "bad_batch":
                score = _break_sigma(run, int(finding.evidence["step"]))
                threshold = bad_batch_logs.MIN_SIGMA
            elif finding.category == "resume_discontinuity":
                jump = _loss_jump(run, int(finding.evidence["resume_step"]))
                assert jump is not None
                score, threshold = jump[2], RESUME_LOSS_SIGMA
            else:
                raise AssertionError(f"unaudited σ in {finding.category}: {finding.message}")
            assert number == fmt(score), (finding.category, finding.message, score)
            assert score >= threshold, (finding.category, score, threshold)
            audited += 1
    if any("σ" in f.message for f in case.findings):
        assert audited > 0


def test_the_audit_covers_spikes_of_both_series() -> None:
    """The fixtures hold σ messages to audit (a check with nothing to check cannot fail)."""
    categories = set()
    for path in RUNS:
        case, _ = analyze_run(path, read_weights=False)
        categories |= {f.category for f in case.findings if SIGMA_TEXT.search(f.message)}
    assert {"loss_spike", "grad_norm_spike"} <= categories
