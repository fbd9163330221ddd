"""A fast, low-noise descent is no repeated data (healthy-run hunt of session 25): a real
Trainer run of a BERT classifier (clean labels, random sampler) reached 0.06 and kept falling
smoothly; its loss 3 steps apart fell at every point of steps 691-706, which read as "the same 3
batches in turn fed again". The 20 points before that stretch fall 31% of their level; a
repetition needs them to hold one (MAX_FALL_BEFORE)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tscope.analyzers.explainers import repeated_data

# train/loss of that run, steps 1-900 (tests/data/loss_series/README.md).
SERIES = Path(__file__).parent / "data" / "loss_series" / "bert_classifier_descent.csv"


def _loss() -> tuple[np.ndarray, np.ndarray]:
    table = np.loadtxt(SERIES, delimiter=",", skiprows=1)
    return table[:, 0].astype(np.int64), table[:, 1]


def test_a_smooth_fast_descent_is_not_read_as_repeated_batches():
    steps, loss = _loss()
    assert repeated_data.repetitions(steps, loss) == []


def test_without_the_level_test_it_was(monkeypatch):
    monkeypatch.setattr(repeated_data, "MAX_FALL_BEFORE", 10.0)
    steps, loss = _loss()
    found = repeated_data.repetitions(steps, loss)
    assert [r.period for r in found] == [3]
