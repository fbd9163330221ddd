"""bad_batch: samples whose loss and gradient sit far outside their batch's distribution."""

from __future__ import annotations

from collections import defaultdict

from tscope.analyzers.replay.base import qualified
from tscope.analyzers.signals import fmt
from tscope.model import Finding
from tscope.model.categories import Category
from tscope.model.replay import BadSample, ReplayResult


def bad_batch_findings(result: ReplayResult, qualified: bool) -> list[Finding]:
    """One finding per step holding flagged samples. `qualified`: the replay did not reproduce
    the log, so what it flags is about the replayed data, which may differ from the run's."""
    by_step: dict[int, list[BadSample]] = defaultdict(list)
    for sample in result.bad_samples:
        by_step[sample.step].append(sample)
    whole = {
        record.get("step")
        for record in result.sample_attribution
        if isinstance(record, dict) and record.get("whole_batch")
    }
    findings = []
    for step, samples in sorted(by_step.items()):
        samples.sort(key=lambda s: s.index)
        indices = [s.index for s in samples]
        share = sum(s.share for s in samples)
        message = (
            f"Step {step}'s batch holds {len(samples)} outlier sample"
            f"{'s' if len(samples) != 1 else ''} (indices {', '.join(map(str, indices))} in the "
            f"batch) with losses {fmt(min(s.loss for s in samples))}–"
            f"{fmt(max(s.loss for s in samples))}; together they carry {share:.0%} of the "
            "step's gradient."
        )
        if step in whole:
            message = (
                f"Step {step}'s whole batch is bad: all {len(samples)} samples (losses "
                f"{fmt(min(s.loss for s in samples))}–{fmt(max(s.loss for s in samples))}) stand "
                "out from the rows of the neighbouring steps on both their loss and their "
                "gradient norm, so the batch's loss and gradient stand out from the neighbouring "
                "batches."
            )
        if qualified:
            message += " The replay did not reproduce the log: these are the replayed batches."
        findings.append(
            Finding(
                category="bad_batch",
                severity="info" if qualified else "warning",
                confidence=0.5 if qualified else min(0.95, 0.6 + 0.4 * share),
                step=step,
                layer=None,
                message=message,
                evidence={
                    "step": step,
                    "indices": indices,
                    "losses": [s.loss for s in samples],
                    "gradient_shares": [s.share for s in samples],
                    "combined_share": share,
                    "whole_batch": step in whole,
                },
                suggestion=_skip_advice(step, step in whole, result.checkpoint_format),
                source="replay",
                threshold=(
                    "gradient-norm z ≥ 5 and loss z ≥ 5 within the batch (two-pass robust z) or "
                    "against the neighbouring steps' rows, the flagged rows together ≥ 50% of "
                    "the step's gradient"
                ),
            )
        )
    return findings


class BadBatchExplainer:
    name = "bad_batch"
    categories: tuple[str, ...] = ("bad_batch",)
    defines = (
        Category(
            "bad_batch",
            "cause",
            "warning",
            "replay",
            "a bad batch (corrupted or unusual samples)",
            "samples whose loss or gradient stands out in the replayed steps; from logs, a one-step "
            "loss break above the local trend with a gradient-norm spike in the same step",
        ),
    )

    def run(self, result: ReplayResult) -> list[Finding]:
        return bad_batch_findings(result, qualified(result))


def _skip_advice(step: int, whole_batch: bool, checkpoint_format: str) -> str:
    """How to leave the batch out on restart, in the producer's own terms: Lightning's
    SpikeDetection reads skip_batches.json; the Trainer and a plain loop have no batch-skip list,
    so the rows are dropped from the data (their indices are in replay.json)."""
    what = f"step {step}'s batch" if whole_batch else f"these samples (or step {step}'s batch)"
    inspect = (
        "inspect its data source." if whole_batch else "inspect the samples' tokens for corruption."
    )
    if checkpoint_format == "lightning":
        how = "skip_batches.json in the case folder lists it in Lightning's SpikeDetection format"
    else:
        how = (
            "drop their rows from the dataset before resuming (replay.json's sample_attribution "
            "names them; skip_batches.json lists the batch in Lightning's SpikeDetection format "
            "for loops that read it)"
        )
    return f"Leave out {what} on restart: {how}; {inspect}"
