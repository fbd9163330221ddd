"""The logged points right after a resume: what the resume explainer reads, and what other rules
leave to it (an instability there is the resume's to explain, not a batch's or the warm-up's)."""

from __future__ import annotations

import numpy as np

from tscope.analyzers.signals import primary_loss
from tscope.model import Run

# Points after the resume that are checked (the first steps after a bad load are the telling ones).
RESUME_CHECK_POINTS = 3


def loss_points_between(run: Run, first: int, last: int) -> int:
    """Logged loss points after `first` up to `last` (negative when `last` is before `first`)."""
    loss = primary_loss(run)
    if loss is None or last < first:
        return -1
    steps, _ = run.series(loss)
    # Steps are sorted: two binary searches, not a mask over the whole series per call.
    return int(np.searchsorted(steps, last, "right") - np.searchsorted(steps, first, "right"))


def at_resume(run: Run, step: int) -> bool:
    """`step` is within RESUME_CHECK_POINTS logged loss points from a resume of the run."""
    return any(
        0 <= loss_points_between(run, event.step - 1, step) <= RESUME_CHECK_POINTS
        for event in run.events_of("resume")
    )
