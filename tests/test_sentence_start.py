"""A verdict starts with a capital only when its first word is prose: a metric or tag name keeps
the run's own spelling ("train/loss spiked", not "Train/loss spiked", which names no series)."""

from __future__ import annotations

import pytest

from tscope.model.visible_text import sentence_start


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("loss spiked from 2.7 to 3.7", "Loss spiked from 2.7 to 3.7"),
        ("the learning rate jumped", "The learning rate jumped"),
        ("train/loss spiked from 2.7 to 3.7", "train/loss spiked from 2.7 to 3.7"),
        ("lm_loss became NaN at step 297", "lm_loss became NaN at step 297"),
        ("Loss/train spiked", "Loss/train spiked"),
        ("loss2 spiked", "loss2 spiked"),
        ("", ""),
    ],
)
def test_sentence_start(text: str, expected: str) -> None:
    assert sentence_start(text) == expected


@pytest.mark.parametrize(
    ("text", "names", "expected"),
    [
        # a run's own lowercase name that is no English word keeps its spelling
        ("xent spiked from 2.7 to 3.7", ["xent", "lr"], "xent spiked from 2.7 to 3.7"),
        ("lm loss spiked at step 5", ["lm loss"], "lm loss spiked at step 5"),
        # the plain word stays prose, as in REPORT.md ("Loss spiked from 2.84 to 4.45")
        ("loss spiked from 2.7 to 3.7", ["loss"], "Loss spiked from 2.7 to 3.7"),
        # a name only as a prefix of the first word is not the name
        ("xentropy rose", ["xent"], "Xentropy rose"),
    ],
)
def test_sentence_start_knows_the_runs_names(text: str, names: list[str], expected: str) -> None:
    assert sentence_start(text, names) == expected
