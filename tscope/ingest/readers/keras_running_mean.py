"""Keras' per-batch TensorBoard values are running means since the epoch began; this recovers the
per-batch (or per-logging-interval) values from them, where the epoch boundaries are certain.

What Keras 3 writes (keras/src/callbacks/tensorboard.py, backend/tensorflow/trainer.py):
- `on_train_batch_begin` adds 1 to `_global_train_batch` (0 at `on_train_begin`), and
  `on_train_batch_end` writes `batch_<name>` for every entry of the step's logs at that count:
  steps 1, 2, … across epochs. With `update_freq=N`, `summary.record_if(step % N == 0)` keeps
  the steps that are multiples of N (of the global count, not of the batch within the epoch).
- The logs are the compiled metrics' results: the loss is `_loss_tracker`, a `Mean` updated with
  the batch's loss weighted by the batch size and reset by `reset_metrics()` before every epoch.
  So `batch_loss` at batch k of an epoch is the mean of that epoch's batches 1..k.
- `on_epoch_end` writes `epoch_<name>` at the epoch index (from 0, or `initial_epoch`): the same
  metrics read once more after the last batch, so `epoch_loss` equals that batch's `batch_loss`.

With m_k the running mean after batch k, the batches k-N+1..k have mean (k·m_k − (k−N)·m_{k−N})/N
(the first logged point of an epoch: m_k itself). Exact for batches of one size; an epoch's smaller
last batch is weighted as a full one here (its size is not logged).
"""

from __future__ import annotations

import numpy as np

from tscope.model import Caveat, MetricTable

RUNNING_MEAN = "running_mean"  # the caveat's kind
_BATCH_PREFIX = "batch_"
_EPOCH_PREFIX = "epoch_"
# Compiled metrics that are sample- or batch-weighted means, so invertible: the loss (and each
# output's `<output>_loss`) and the accuracies (MeanMetricWrapper). AUC, precision, RMSE and the
# like are not means of per-batch values and stay as logged.
_MEAN_METRIC_SUFFIXES = ("loss", "accuracy")


# Candidate epoch lengths × logged epochs tried at most: Keras' own logs need a few hundred
# (update_freq / epochs candidates); a file declaring one batch point at step 10**12 would ask for
# ~10**12 and hang the read.
MAX_LAYOUT_CHECKS = 1_000_000


def batch_values_from_running_means(
    table: MetricTable, source: str
) -> tuple[MetricTable, list[Caveat]]:
    """`table` with each Keras `batch_<mean metric>` series replaced by its per-batch (or
    per-interval) values, and a caveat saying so; unchanged where the epochs cannot be placed."""
    tags = table.original_name.labels
    present = set(table.original_name.used_labels())
    pairs = [
        tag
        for tag in tags
        if tag in present
        and tag.startswith(_BATCH_PREFIX)
        and tag[len(_BATCH_PREFIX) :].endswith(_MEAN_METRIC_SUFFIXES)
        and f"{_EPOCH_PREFIX}{tag[len(_BATCH_PREFIX) :]}" in present
    ]
    if not pairs:
        return table, []
    values = table.value.copy()
    recovered: list[tuple[str, int, int]] = []  # (tag, batches per epoch, update_freq)
    refused: list[tuple[str, str]] = []  # (tag, why)
    for tag in pairs:
        batch_rows = _rows(table, tag)
        epoch_rows = _rows(table, f"{_EPOCH_PREFIX}{tag[len(_BATCH_PREFIX) :]}")
        layout, why = _epoch_layout(
            table.step[batch_rows], values[batch_rows], table.step[epoch_rows], values[epoch_rows]
        )
        if layout is None:
            refused.append((tag, why))
            continue
        per_epoch, every = layout
        values[batch_rows] = interval_means(table.step[batch_rows], values[batch_rows], per_epoch)
        recovered.append((tag, per_epoch, every))
    caveats = [_recovered_caveat(recovered, source)] if recovered else []
    caveats.extend(_refused_caveat(tag, why, source) for tag, why in refused)
    if not recovered:
        return table, caveats
    metrics = MetricTable(
        table.step, table.metric, values, table.source, table.original_name, table.order
    )
    return metrics, caveats


def _rows(table: MetricTable, tag: str) -> np.ndarray:
    """The row indices of `tag`, in step order."""
    code = table.original_name.labels.index(tag)
    rows = np.flatnonzero(table.original_name.codes == code)
    return rows[np.argsort(table.step[rows], kind="stable")]


def _epoch_layout(
    batch_steps: np.ndarray,
    running_means: np.ndarray,
    epoch_steps: np.ndarray,
    epoch_values: np.ndarray,
) -> tuple[tuple[int, int] | None, str]:
    """(batches per epoch, update_freq) when one fit() wrote the points and only one epoch length
    fits them, else None and why. Each logged epoch end must hold that epoch's `epoch_` value
    (the same float), and at least one must be logged."""
    if batch_steps.size == 0 or not np.all(np.isfinite(running_means)):
        return None, "some of its values are not finite"
    every = int(batch_steps[0])
    expected = every * np.arange(1, batch_steps.size + 1, dtype=np.int64)
    if every < 1 or not np.array_equal(batch_steps, expected):
        return None, (
            "its steps are not one run of every N-th batch from the start (a second fit() or a "
            "resume restarts Keras' batch count)"
        )
    epochs = epoch_steps.size
    if epochs == 0 or not np.array_equal(epoch_steps, epoch_steps[0] + np.arange(epochs)):
        return None, "its epoch_ series is not one value per consecutive epoch"
    last = int(batch_steps[-1])
    # The last epoch ends at or after the last logged step, before the next multiple of N.
    lengths = range(-(-last // epochs), (last + every - 1) // epochs + 1)
    if len(lengths) * epochs > MAX_LAYOUT_CHECKS:  # a crafted file: one point at step 10**12
        return None, "its steps are too sparse to place the epochs"
    fitting = [
        length
        for length in lengths
        if (_anchors(length, every, last, running_means, epoch_values) or 0) > 0
    ]
    if len(fitting) != 1:
        return None, (
            "no single number of batches per epoch puts each epoch's last batch on its epoch_ "
            "value (an early stop, a partial log, or not Keras' callback)"
        )
    return (fitting[0], every), ""


def _anchors(
    per_epoch: int, every: int, last: int, running_means: np.ndarray, epoch_values: np.ndarray
) -> int | None:
    """How many epoch ends are logged and match their epoch's value; None if one does not."""
    matched = 0
    for epoch, value in enumerate(epoch_values.tolist()):
        end = (epoch + 1) * per_epoch
        if end % every or end > last:
            continue
        if running_means[end // every - 1] != value:
            return None
        matched += 1
    return matched


def interval_means(steps: np.ndarray, running_means: np.ndarray, per_epoch: int) -> np.ndarray:
    """The mean of the batches since the previous logged point of the same epoch, from Keras'
    running means at global batch counts `steps` (from 1, sorted) with `per_epoch` batches an
    epoch: (k·m_k − j·m_j) / (k − j), k and j the batches within the epoch (j = 0: none)."""
    within = (steps - 1) % per_epoch + 1  # batch k within its epoch, from 1
    epoch = (steps - 1) // per_epoch
    same_epoch = np.zeros(steps.size, dtype=bool)
    same_epoch[1:] = epoch[1:] == epoch[:-1]
    previous_within = np.where(same_epoch, np.roll(within, 1), 0)
    previous_mean = np.where(same_epoch, np.roll(running_means, 1), 0.0)
    totals = within * running_means - previous_within * previous_mean
    result: np.ndarray = totals / (within - previous_within)
    return result


def _recovered_caveat(recovered: list[tuple[str, int, int]], source: str) -> Caveat:
    tags = ", ".join(tag for tag, _, _ in recovered)
    _, per_epoch, every = recovered[0]
    what = "each batch's value" if every == 1 else f"the mean of each {every} batches"
    return Caveat(
        RUNNING_MEAN,
        f"Keras' TensorBoard callback logs {tags} as the running mean since the epoch began "
        f"(its metrics reset each epoch); tscope recovered {what} from consecutive running "
        f"means, with {per_epoch} batches per epoch (each epoch's last batch holds its epoch_ "
        "value). Exact when the batches have one size; an epoch's smaller last batch is "
        "counted as a full one. Float32 rounding in the logged means grows with the batch's "
        "place in the epoch.",
        source,
        {"batches_per_epoch": per_epoch, "update_freq": every},
    )


def _refused_caveat(tag: str, why: str, source: str) -> Caveat:
    return Caveat(
        RUNNING_MEAN,
        f"{tag} looks like Keras' TensorBoard callback's: the running mean since the epoch "
        f"began, not the batch's value. It is shown as logged because {why}: a one-batch spike "
        "shows at 1/k of its height at the epoch's k-th batch.",
        source,
    )
