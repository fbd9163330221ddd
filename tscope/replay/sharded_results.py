"""The ranks' attribution records of a sharded replay, judged by the single-process rules."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from tscope.replay.attribution import SampleAttribution, StepAttribution
from tscope.replay.outliers import judge_batch
from tscope.replay.sample_grads import SUM_REL_TOL


def attribution_from_records(
    records: Sequence[dict[str, Any]], watched: Iterable[int]
) -> SampleAttribution:
    """Each watched step's rows (rank order) judged within the step and against the other
    watched steps' rows, exactly as SampleAttribution judges a single-process replay's."""
    attribution = SampleAttribution(watched)
    for record in records:
        rows = record.get("attribution")
        if rows is None:
            continue
        losses = tuple(float(v) for v in record["per_sample_loss"])
        norms, shares = tuple(rows["norms"]), tuple(rows["shares"])
        notes: tuple[str, ...] = ()
        if len(shares) != len(losses):
            notes, norms, shares = ("the step's gradient is zero: no gradient shares",), (), ()
        verdict = judge_batch(losses, norms or None, shares or None)
        difference = rows["sum_rel_diff"]
        attribution.record(
            StepAttribution(
                step=int(record["step"]),
                losses=losses,
                micro_batch_rows=tuple(int(n) for n in record["rank_rows"]),
                verdict=verdict,
                grad_norms=norms,
                shares=shares,
                method=str(rows["method"]),
                sum_rel_diff=difference,
                gradients_checked=difference is not None and difference <= SUM_REL_TOL,
                seconds=float(rows["seconds"]),
                notes=notes,
            )
        )
    return attribution
