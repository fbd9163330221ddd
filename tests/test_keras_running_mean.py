"""Keras' TensorBoard callback logs batch_loss as the running mean since the epoch began: tscope
recovers each batch's loss, so a one-batch spike shows at its height and at its step."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tscope.ingest.readers.keras_running_mean import (
    RUNNING_MEAN,
    batch_values_from_running_means,
    interval_means,
)
from tscope.ingest.readers.tensorboard import TensorBoardReader
from tscope.model import MetricTable, TextColumn
from tscope.pipeline import analyze_run

KERAS = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "keras"
PLANTED = json.loads((KERAS / "planted.json").read_text())


def _train_read(run: str):  # type: ignore[no-untyped-def]
    (path,) = (KERAS / run / "train").glob("events.out.tfevents.*")
    return TensorBoardReader().read(path, f"{run}/train/{path.name}")


def _series(table: MetricTable, tag: str) -> tuple[np.ndarray, np.ndarray]:
    rows = table.original_name.codes == table.original_name.labels.index(tag)
    order = np.argsort(table.step[rows])
    return table.step[rows][order], table.value[rows][order]


@pytest.mark.parametrize("run", ["healthy", "corrupted_batch"])
def test_recovered_batch_losses_average_to_each_epoch_loss(run: str) -> None:
    read = _train_read(run)
    steps, losses = _series(read.metrics, "batch_loss")
    _, epoch_losses = _series(read.metrics, "epoch_loss")
    per_epoch = PLANTED["batches_per_epoch"]
    assert steps.tolist() == list(range(1, PLANTED["epochs"] * per_epoch + 1))
    assert np.all(np.isfinite(losses))
    means = losses.reshape(PLANTED["epochs"], per_epoch).mean(axis=1)
    np.testing.assert_allclose(means, epoch_losses, rtol=1e-6)
    (caveat,) = [c for c in read.caveats if c.kind == RUNNING_MEAN]
    assert "batch_loss" in caveat.message and f"{per_epoch} batches per epoch" in caveat.message


def test_every_fifth_batch_becomes_the_mean_of_its_five() -> None:
    read = _train_read("healthy_every5")
    steps, intervals = _series(read.metrics, "batch_loss")
    _, epoch_losses = _series(read.metrics, "epoch_loss")
    assert steps.tolist() == list(range(5, 181, 5))
    means = intervals.reshape(PLANTED["epochs"], -1).mean(axis=1)  # 12 equal intervals an epoch
    np.testing.assert_allclose(means, epoch_losses, rtol=1e-6)
    _, every_batch = _series(_train_read("healthy").metrics, "batch_loss")
    np.testing.assert_allclose(intervals, every_batch.reshape(-1, 5).mean(axis=1), rtol=1e-4)


def test_the_corrupted_batch_is_found_at_its_step() -> None:
    planted_step = PLANTED["runs"]["corrupted_batch"]["planted"]["global_step"]
    findings = analyze_run(KERAS / "corrupted_batch", read_weights=False).case.findings
    spikes = [f for f in findings if f.category == "loss_spike" and f.step is not None]
    assert any(abs(f.step - planted_step) <= 1 for f in spikes), findings


def test_the_healthy_keras_run_raises_no_warning() -> None:
    findings = analyze_run(KERAS / "healthy", read_weights=False).case.findings
    assert [f for f in findings if f.severity in ("warning", "critical")] == []


def _running_means(batch_losses: np.ndarray, sizes: np.ndarray) -> np.ndarray:
    """What Keras' Mean logs after each batch: the batch-size-weighted mean so far."""
    return np.cumsum(batch_losses * sizes) / np.cumsum(sizes)


def test_inversion_recovers_each_batch_and_each_interval() -> None:
    rng = np.random.default_rng(0)
    per_epoch, epochs = 12, 3
    losses = rng.uniform(0.5, 2.0, size=(epochs, per_epoch))
    losses[1, 4] = 40.0  # a one-batch spike
    sizes = np.full(per_epoch, 32.0)
    means = np.concatenate([_running_means(epoch, sizes) for epoch in losses])
    steps = np.arange(1, epochs * per_epoch + 1)
    np.testing.assert_allclose(interval_means(steps, means, per_epoch), losses.ravel())
    every = 4  # update_freq=4: steps 4, 8, …; the mean of the 4 batches since the last point
    logged = steps[every - 1 :: every]
    expected = losses.reshape(-1, every).mean(axis=1)
    np.testing.assert_allclose(interval_means(logged, means[logged - 1], per_epoch), expected)


def test_a_partial_last_batch_is_pulled_toward_the_epoch_mean_but_the_rest_are_exact() -> None:
    """Keras weights its Mean by the batch size, which the log does not hold."""
    losses = np.array([1.0, 1.2, 0.8, 3.0])
    sizes = np.array([32.0, 32.0, 32.0, 8.0])
    recovered = interval_means(np.arange(1, 5), _running_means(losses, sizes), 4)
    np.testing.assert_allclose(recovered[:3], losses[:3])
    assert 1.0 < recovered[3] < 3.0


def _table(rows: list[tuple[str, int, float]]) -> MetricTable:
    tags = sorted({tag for tag, _, _ in rows})
    codes = np.asarray([tags.index(tag) for tag, _, _ in rows])
    names = TextColumn(codes, tags)
    return MetricTable(
        np.asarray([step for _, step, _ in rows]),
        names,
        np.asarray([value for _, _, value in rows]),
        "events",
        names,
        np.arange(len(rows)),
    )


def test_a_batch_loss_without_an_epoch_loss_is_left_as_logged() -> None:
    table = _table([("batch_loss", step, 2.0 / step) for step in range(1, 20)])
    kept, caveats = batch_values_from_running_means(table, "events")
    assert kept is table and caveats == []


def test_epochs_that_do_not_line_up_leave_the_values_and_say_why() -> None:
    """The epoch_loss matches no batch: not one fit() of Keras, or not certain where epochs end."""
    rows = [("batch_loss", step, 1.0 + 0.01 * step) for step in range(1, 21)]
    rows += [("epoch_loss", 0, 5.0), ("epoch_loss", 1, 6.0)]
    kept, caveats = batch_values_from_running_means(_table(rows), "events")
    np.testing.assert_array_equal(kept.value, _table(rows).value)
    (caveat,) = caveats
    assert caveat.kind == RUNNING_MEAN and "shown as logged" in caveat.message


def test_a_restarted_batch_count_is_left_as_logged() -> None:
    """A second fit() in the same writer starts Keras' batch count at 1 again."""
    rows = [("batch_loss", step, 1.0) for step in (1, 2, 3, 1, 2, 3)]
    rows += [("epoch_loss", 0, 1.0), ("epoch_loss", 1, 1.0)]
    kept, caveats = batch_values_from_running_means(_table(rows), "events")
    np.testing.assert_array_equal(kept.value, _table(rows).value)
    assert "restarts" in caveats[0].message


def test_a_crafted_far_step_is_refused_quickly() -> None:
    """One batch point declared at step 10**12 beside two epochs: the candidate epoch lengths
    would number 5·10**11; the layout is refused instead of searched."""
    from tscope.ingest.readers.keras_running_mean import _epoch_layout

    layout, why = _epoch_layout(
        np.array([10**12]), np.array([1.0]), np.array([0, 1]), np.array([1.0, 1.0])
    )
    assert layout is None and "too sparse" in why
