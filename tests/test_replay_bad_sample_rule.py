"""The rule that names bad samples from per-sample gradients (robust z against the batch: planted
rows flagged, clean correlated batches not, small or broken batches abstain) and the skip lists it
writes (Lightning's spike detection, gradient accumulation, the entry's batch index, never into
the run directory).
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from tscope.errors import UsageError
from tscope.model.replay import BadSample
from tscope.replay.outliers import BAD_SAMPLE_Z, MIN_ROWS_FOR_RULE, judge_batch, robust_z
from tscope.replay.skip_list import (
    ENTRY_BATCH_INDEX,
    SINGLE_EPOCH,
    SKIP_BATCHES_FILE,
    suggest_skips,
    write_skip_batches,
)

CLEAN_SEEDS = 5000  # synthetic clean batches per false-alarm test


BATCH_ROWS = 24  # the fixture runs' batch size


# Row-level false alarms allowed among CLEAN_SEEDS correlated batches: the simulated rate at
# correlation 0.8 is 3e-4 (outliers.py), so ~1.5 are expected; 0.2 % leaves room for the seed.
CANDIDATE_BUDGET = 10


PLANTED_SEEDS = 500


PLANTED_MISS_BUDGET = 5  # 1 %: simulated misses are 0.15 % (outliers.py)


def _clean_batch(rng: np.random.Generator, correlation: float) -> tuple[np.ndarray, np.ndarray]:
    """Per-sample losses and gradient norms of a clean batch: correlated normals."""
    difficulty = rng.standard_normal(BATCH_ROWS)
    noise = rng.standard_normal(BATCH_ROWS)
    losses = 3.0 + 0.3 * difficulty  # (24,)
    norms = 0.07 + 0.01 * (correlation * difficulty + np.sqrt(1 - correlation**2) * noise)
    return losses, norms


@pytest.mark.parametrize("correlation", [0.0, 0.8])
def test_clean_normal_batches_are_not_flagged(correlation):
    candidates = bad = 0
    for seed in range(CLEAN_SEEDS):
        losses, norms = _clean_batch(np.random.default_rng(seed), correlation)
        shares = norms / norms.sum()  # no row pulls against the others
        verdict = judge_batch(losses.tolist(), norms.tolist(), shares.tolist())
        assert verdict.applied
        candidates += bool(verdict.candidates)
        bad += bool(verdict.bad)
    assert bad == 0
    assert candidates <= (0 if correlation == 0.0 else CANDIDATE_BUDGET)


def test_planted_rows_are_flagged_in_nearly_every_batch():
    planted = [2, 5, 11, 13, 17, 22]  # as in the fixture
    missed = 0
    for seed in range(PLANTED_SEEDS):
        rng = np.random.default_rng(seed)
        losses, norms = _clean_batch(rng, 0.8)
        # Random-token rows: 10 clean sigmas up on the loss, 30 on the gradient norm. A quarter of
        # the batch bad inflates a one-pass MAD about 1.45-fold; the second pass undoes it.
        losses[planted] = 3.0 + 0.3 * (10 + 0.2 * rng.standard_normal(len(planted)))
        norms[planted] = 0.07 + 0.01 * (30 + 2 * rng.standard_normal(len(planted)))
        shares = norms**2 / (norms**2).sum()  # big rows dominate the gradient
        verdict = judge_batch(losses.tolist(), norms.tolist(), shares.tolist())
        missed += list(verdict.bad) != planted
        assert min(verdict.grad_norm_z[i] for i in planted) >= BAD_SAMPLE_Z
    # A clean sample that happens to spread wide (1 seed in 500 here) leaves 10σ rows at z ~ 5.
    assert missed <= PLANTED_MISS_BUDGET


def test_a_hard_but_natural_row_is_an_outlier_but_not_a_bad_sample():
    losses, norms = _clean_batch(np.random.default_rng(0), 0.8)
    losses[4], norms[4] = 5.5, 0.2
    shares = np.full(BATCH_ROWS, 0.8 / (BATCH_ROWS - 1))
    shares[4] = 0.2  # it drove a fifth of the update: the other rows made the step
    verdict = judge_batch(losses.tolist(), norms.tolist(), shares.tolist())
    assert verdict.candidates == (4,) and verdict.bad == ()
    assert "not bad" in verdict.note


def test_the_rule_abstains_on_small_batches_missing_gradients_and_nan():
    losses, norms = _clean_batch(np.random.default_rng(1), 0.0)
    shares = (norms / norms.sum()).tolist()
    small = judge_batch(
        losses[: MIN_ROWS_FOR_RULE - 1].tolist(),
        norms[: MIN_ROWS_FOR_RULE - 1].tolist(),
        shares[: MIN_ROWS_FOR_RULE - 1],
    )
    assert not small.applied and "at least" in small.note
    assert not judge_batch(losses.tolist(), None, None).applied
    losses[3] = float("nan")
    assert not judge_batch(losses.tolist(), norms.tolist(), shares).applied


def test_robust_z_survives_a_batch_without_spread():
    assert robust_z([2.0] * 10).tolist() == [0.0] * 10
    z = robust_z([1.0] * 7 + [2.0, 3.0, 9.0])  # MAD 0: the mean absolute deviation stands in
    assert z[-1] > z[-2] > 0 and z[0] == 0.0


def _bad(step: int, *rows: int) -> list[BadSample]:
    return [BadSample(step=step, index=row, loss=5.0, share=0.15) for row in rows]


def test_skip_batches_follow_lightning_spike_detection(tmp_path):
    skips = suggest_skips(_bad(145, 2, 5), {145: [24]})
    assert skips.batches == (143, 144) and skips.convention == SINGLE_EPOCH
    assert skips.samples == {145: (2, 5)}
    path = write_skip_batches(tmp_path / "case", skips)
    assert path.name == SKIP_BATCHES_FILE
    assert path.read_text() == json.dumps([143, 144], indent=4)  # json.dump(bad_batches, f, 4)
    assert json.loads(path.read_text()) == [143, 144]


def test_skip_batches_under_gradient_accumulation_name_the_micro_batch():
    # Step 10 with 4 micro-batches of 6 rows: rows 13 and 14 sit in micro-batch 2.
    skips = suggest_skips(_bad(10, 13, 14), {10: [6, 6, 6, 6]})
    assert skips.batches == ((10 - 1) * 4 + 1, (10 - 1) * 4 + 2)
    first_step = suggest_skips(_bad(1, 0), {1: [24]})
    assert first_step.batches == (0,)  # no batch -1


def test_skip_batches_use_the_entry_batch_index(tmp_path):
    skips = suggest_skips(_bad(145, 2), {145: [24]}, batch_index=lambda step: (step - 1) % 76)
    assert skips.batches == (67, 68) and skips.convention == ENTRY_BATCH_INDEX
    with pytest.raises(UsageError, match="batch_index"):
        suggest_skips(_bad(145, 2), {145: [24]}, batch_index=lambda step: "x")  # type: ignore


def test_skip_batches_are_never_written_into_the_run_directory(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    skips = suggest_skips(_bad(145, 2), {145: [24]})
    with pytest.raises(UsageError, match="never writes into an input"):
        write_skip_batches(run / "case", skips, run_dir=run)
    assert not (run / "case").exists()
