"""An MLflow SQLite store whose run logs more distinct metric keys than tscope reads.

A 21 MB mlflow.db (no index) with 1,000,000 one-point keys beside `train/loss` took 11.8 s and
606 MB and was then refused whole ("interrupted"): every key was named before any cap, and each
key was one query, a scan of the whole metrics table with no index (keys x rows). The keys are
now capped as the file store's are (mlflow_files.MAX_KEYS, chosen by series_cap.columns_to_read:
the loss-like ones first) and read in one query: the run is analyzed and one `partial` line says
how many keys were not read.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tscope.ingest.readers.mlflow_files import MAX_KEYS
from tscope.ingest.readers.mlflow_sqlite import MlflowSqliteReader
from tscope.model.metric_names import LOSS
from tscope.pipeline import analyze_run

EXTRA_KEYS = 500
LOSS_POINTS = 200


def _store_of_many_keys(tmp_path: Path, keys: int) -> Path:
    """One run: `keys` distinct one-point keys, then `train/loss` over LOSS_POINTS steps; tables
    without types and without an index, as a crafted store has them."""
    path = tmp_path / "mlflow.db"
    connection = sqlite3.connect(path)
    connection.executescript(
        """
        CREATE TABLE runs(run_uuid, name, start_time, lifecycle_stage);
        CREATE TABLE metrics(key, value, timestamp, run_uuid, step, is_nan);
        CREATE TABLE params(key, value, run_uuid);
        CREATE TABLE experiments(x);
        CREATE TABLE latest_metrics(x);
        INSERT INTO runs VALUES ('r', 'run', 0, 'active');
        """
    )
    connection.execute(
        "INSERT INTO metrics WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c "
        "WHERE i < ?) SELECT 'k' || i, 1, 0, 'r', i % 2, 0 FROM c",
        (keys,),
    )
    connection.execute(
        "INSERT INTO metrics WITH RECURSIVE c(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM c "
        "WHERE i < ?) SELECT 'train/loss', 2.0 + (i % 3) * 0.1, i, 'r', i, 0 FROM c",
        (LOSS_POINTS,),
    )
    connection.commit()
    connection.close()
    return path


def test_keys_past_the_cap_are_left_out_and_the_loss_is_read(tmp_path: Path) -> None:
    keys = MAX_KEYS + EXTRA_KEYS
    path = _store_of_many_keys(tmp_path, keys)

    read = MlflowSqliteReader().read(path, "mlflow.db")

    metrics = read.metrics.metric
    names = set(metrics.labels)
    assert LOSS in names
    loss_points = sum(1 for code in metrics.codes if metrics.labels[code] == LOSS)
    assert loss_points == LOSS_POINTS
    assert len(names) <= MAX_KEYS
    # MAX_KEYS keys read, train/loss among them: all the other keys past the cap are not.
    assert len(read.partial) == 1, read.partial
    problem = read.partial[0].problem
    assert f"{keys + 1 - MAX_KEYS:,} of the run's {keys + 1:,} metric keys not read" in problem


def test_the_run_is_analyzed_with_one_partial_entry(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    path = _store_of_many_keys(run, MAX_KEYS + EXTRA_KEYS)

    case, analyzed = analyze_run(path)

    steps, _ = analyzed.series(LOSS)
    assert steps.tolist() == list(range(1, LOSS_POINTS + 1))
    partial = [p.problem for p in case.partial if p.path.endswith("mlflow.db")]
    assert len(partial) == 1, partial
    assert "metric keys not read" in partial[0]
