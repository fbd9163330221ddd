"""repeated_data at periods up to 8, judged within the stretch's own segment of the run.

A plain loop whose loader cycles the same 8 batches from step 250 (a planted-cause hunt of
session 25) was healthy while periods 1-4 were looked for. The re-descent after a resume that
lost the weights is smooth at every period; judged against points from before the resume, two
benchmark runs got a repeated_data finding there (nanoGPT, resumed at step 111)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tscope.analyzers.explainers.repeated_data import repetitions

SERIES = Path(__file__).parent / "data" / "loss_series"  # provenance: its README.md
RESUME_STEP = 111


def _loss(name: str) -> tuple[np.ndarray, np.ndarray]:
    table = np.loadtxt(SERIES / name, delimiter=",", skiprows=1)
    return table[:, 0].astype(np.int64), table[:, 1]


def test_a_loader_cycling_eight_batches_is_found():
    steps, loss = _loss("loader_cycling_8_batches.csv")
    found = repetitions(steps, loss)
    assert [r.period for r in found] == [8]
    assert 250 <= found[0].first_step <= 300


def test_the_re_descent_after_a_resume_is_no_repetition():
    steps, loss = _loss("nanogpt_resumed_weights_lost.csv")
    assert repetitions(steps, loss, [RESUME_STEP]) == []
