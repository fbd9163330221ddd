"""The accuracy benchmark's "cause recorded" criterion (bench/accuracy/score.py
`cause_recorded`): computed from the truth and the producer's logging, never from tscope.

Lightning with gradient accumulation logs the last micro-batch's loss of each optimizer step
(lightning 2.x `_LoggerConnector.update_train_step_metrics` returns while accumulating), so a
corrupted row in an earlier micro-batch leaves no trace in the logged loss: dev
lightning-bad_batch-00 (1 row of 32, in call 534 of calls 533–536) is such a run. The Trainer
logs the mean of the step's micro-batch losses, so holdout trainer_llama-bad_batch-50's one row
of 16 (call 346 of 345–348) does enter its logged loss.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

ACCURACY_DIR = Path(__file__).resolve().parents[1] / "bench" / "accuracy"
if str(ACCURACY_DIR) not in sys.path:
    sys.path.insert(0, str(ACCURACY_DIR))

pytest.importorskip("torch")

import paths  # noqa: E402, F401  (puts fixtures/ on sys.path, no bytecode in the repository)
from score import VISIBLE_SIGMA, cause_recorded, logged_corrupted_rows  # noqa: E402
from spec import RunSpec, build_specs  # noqa: E402


def _spec(name: str) -> RunSpec:
    return next(s for s in build_specs() if s.name == name)


def test_lightning_logs_only_the_last_micro_batch_of_an_accumulated_step() -> None:
    hidden = _spec("lightning-bad_batch-00")
    assert hidden.grad_accum == 4 and hidden.plant["rows"] == 1
    assert logged_corrupted_rows(hidden) == 0
    assert not cause_recorded(hidden, visibility=100.0)  # no row logged: a visibility is chance
    spread = _spec("lightning-bad_batch-03")  # 16 of 32 rows over all four micro-batches
    assert logged_corrupted_rows(spread) == 5  # the last call's rows only


def test_the_trainer_logs_every_micro_batch_and_the_trace_must_clear_the_noise() -> None:
    trainer = _spec("trainer_llama-bad_batch-50")
    assert trainer.grad_accum == 4 and logged_corrupted_rows(trainer) == 1
    assert cause_recorded(trainer, visibility=VISIBLE_SIGMA)
    assert not cause_recorded(trainer, visibility=VISIBLE_SIGMA - 0.1)
    assert not cause_recorded(trainer, visibility=None)


def test_other_causes_count_as_recorded() -> None:
    assert cause_recorded(_spec("lightning-repeated_data-56"), visibility=None)
