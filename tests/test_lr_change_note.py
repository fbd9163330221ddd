"""The bad batch's evidence says what the LR did through the incident, and only what the log
shows: steady, following a schedule smoothly, or climbing (a smooth climb may be a ramp, not the
schedule: bench holdout5 lightning-lr_ramp-70 read "followed its schedule smoothly" at ×42)."""

from __future__ import annotations

import numpy as np
import pytest

from tests.synthetic import loss_curve, make_run
from tscope.analyzers.base import Evidence
from tscope.analyzers.cause_evidence import lr_change_note
from tscope.analyzers.impact import Impact
from tscope.analyzers.incidents import Incident
from tscope.model.metric_names import LEARNING_RATE, LOSS

STEPS = 200


def _impact() -> Impact:
    fields = {name: 0 for name in Impact.__dataclass_fields__}
    return Impact(**{**fields, "recovered": True, "nonfinite": False, "returned_to_initial": False})


@pytest.mark.parametrize(
    ("lr", "expected"),
    [
        (np.full(STEPS, 3e-4), "the learning rate was steady at"),
        (3e-4 * np.linspace(1.0, 0.5, STEPS), "followed its schedule smoothly"),
        (1e-4 * 1.05 ** np.arange(STEPS), "the learning rate climbed ×"),
    ],
    ids=["steady", "decaying", "compounding"],
)
def test_the_lr_is_described_as_it_moved(lr: np.ndarray, expected: str) -> None:
    run = make_run({LOSS: loss_curve(STEPS, 0), LEARNING_RATE: lr})
    incident = Incident("spike", LOSS, 150, 151, 153, _impact())
    note = lr_change_note(Evidence(run), incident)
    assert note is not None and expected in note
