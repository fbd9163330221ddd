"""MLflow's SQLite store (readers/mlflow_sqlite.py): a real mlflow.db, run choice, crafted stores."""

from __future__ import annotations

import gzip
import math
import sqlite3
from pathlib import Path

import pytest

from tscope.errors import NothingToAnalyze
from tscope.ingest.base import choosing_run
from tscope.ingest.readers.mlflow_sqlite import MlflowSqliteReader
from tscope.model.metric_names import EVAL_LOSS, LOSS
from tscope.pipeline import analyze_run

STORE = Path(__file__).resolve().parents[1] / "fixtures" / "data" / "mlflow" / "mlflow.db.gz"


def _store(tmp_path: Path) -> Path:
    path = tmp_path / "mlflow.db"
    path.write_bytes(gzip.decompress(STORE.read_bytes()))
    return path


def test_a_store_of_several_runs_names_them_and_asks_for_one(tmp_path: Path) -> None:
    with pytest.raises(NothingToAnalyze) as refused:
        analyze_run(_store(tmp_path))
    message = str(refused.value)
    assert "holds 3 MLflow runs" in message and "'lr_jump' (daaade71)" in message
    assert "--run NAME_OR_ID" in message


def test_the_chosen_runs_are_read_and_judged(tmp_path: Path) -> None:
    store = _store(tmp_path)
    with choosing_run("healthy"):
        case, run = analyze_run(store)
    assert [s.kind for s in run.sources] == ["mlflow_sqlite"]
    assert run.series(LOSS)[0].tolist() == list(range(1, 301))
    assert run.series(EVAL_LOSS)[0].tolist() == [50, 100, 150, 200, 250, 300]
    assert case.summary.status == "healthy", case.summary.verdict
    with choosing_run("daaade71"):  # the start of the lr_jump run's id
        case, run = analyze_run(store)
    card = case.summary.card
    assert card is not None and card.cause.category == "lr_schedule_jump"
    assert any(c.kind == "mlflow_run_chosen" for c in case.caveats)


def test_nan_and_inf_as_mlflow_stores_them(tmp_path: Path) -> None:
    # NaN is value 0 with is_nan 1; ±inf is ±1.797e308.
    with choosing_run("nan_probe"):
        _, run = analyze_run(_store(tmp_path))
    steps, values = run.series("probe")
    assert steps.tolist() == [0, 1, 2, 3, 4]
    assert values[0] == 1.5 and math.isnan(values[1]) and values[2] == math.inf
    assert values[3] == -math.inf and values[4] == 2.5


def test_the_same_runs_read_from_the_file_store_and_the_sqlite_store(tmp_path: Path) -> None:
    file_run = (
        Path(__file__).resolve().parents[1]
        / "fixtures/data/mlflow/filestore/933699634133149499/e58cf9b7899d4dd5af85a82799b4ae7d"
    )
    _, from_files = analyze_run(file_run)
    with choosing_run("lr_jump"):
        _, from_store = analyze_run(_store(tmp_path))
    for name in (LOSS, EVAL_LOSS, "train/learning_rate", "train/grad_norm"):
        assert from_files.series(name)[0].tolist() == from_store.series(name)[0].tolist()
        assert from_files.series(name)[1].shape == from_store.series(name)[1].shape


def _crafted(tmp_path: Path, statements: list[str]) -> Path:
    path = tmp_path / "mlflow.db"
    with sqlite3.connect(path) as connection:
        connection.execute("CREATE TABLE experiments (experiment_id INTEGER)")
        connection.execute("CREATE TABLE latest_metrics (key TEXT)")
        for statement in statements:
            connection.execute(statement)
    connection.close()
    return path


def test_a_metrics_view_is_refused_without_running_it(tmp_path: Path) -> None:
    # A view named like MLflow's table: selecting it would run the crafted recursive query.
    path = _crafted(
        tmp_path,
        [
            "CREATE TABLE runs (run_uuid TEXT, name TEXT, start_time INT, lifecycle_stage TEXT)",
            "CREATE TABLE params (key TEXT, value TEXT, run_uuid TEXT)",
            "CREATE VIEW metrics AS WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 "
            "FROM n) SELECT 'loss' AS key, i AS step, 1.0 AS value, 0 AS is_nan, i AS timestamp,"
            " 'r' AS run_uuid FROM n",
        ],
    )
    reader = MlflowSqliteReader()
    assert reader.can_read(path)
    with pytest.raises(NothingToAnalyze, match="not an MLflow store"):
        analyze_run(path)


def test_a_damaged_store_is_one_line(tmp_path: Path) -> None:
    path = _store(tmp_path)
    data = bytearray(path.read_bytes())
    data[100_000:400_000] = b"\xff" * 300_000
    path.write_bytes(bytes(data))
    with pytest.raises(NothingToAnalyze, match=r"mlflow\.db"):
        analyze_run(path)


def test_a_query_beyond_the_work_budget_is_interrupted(tmp_path: Path) -> None:
    """Every query runs under a budget in proportion to the store's bytes: an endless one (what a
    crafted schema object could make of a query) is interrupted, not waited for."""
    from tscope.ingest.readers.mlflow_sqlite_store import _Store as store_of

    connection = store_of(_store(tmp_path).read_bytes()).connection
    with pytest.raises(sqlite3.OperationalError, match="interrupt"):
        connection.execute(
            "WITH RECURSIVE n(i) AS (SELECT 1 UNION ALL SELECT i + 1 FROM n) SELECT max(i) FROM n"
        ).fetchall()


# ---- the review's findings (red-team of the MLflow readers, 2026-12-06) -------------------------


def _rebuilt_metrics(tmp_path: Path, columns: str, select: str) -> Path:
    """The real store with its metrics table rebuilt as `columns`, filled by `select`."""
    path = _store(tmp_path)
    with sqlite3.connect(path) as connection:
        connection.execute("ALTER TABLE metrics RENAME TO old_metrics")
        connection.execute(f"CREATE TABLE metrics ({columns})")
        connection.execute(f"INSERT INTO metrics {select}")
    connection.close()
    return path


def test_a_computed_column_is_refused_before_any_read(tmp_path: Path) -> None:
    # `value AS (zeroblob(900000000))`: one budget step per row and a 10 GB temporary file.
    path = _rebuilt_metrics(
        tmp_path,
        "key, v0, timestamp, run_uuid, step, is_nan, value AS (zeroblob(900000000))",
        "SELECT key, value, timestamp, run_uuid, step, is_nan FROM old_metrics",
    )
    with choosing_run("healthy"), pytest.raises(NothingToAnalyze, match="plain tables"):
        analyze_run(path)


def test_rows_of_other_types_are_left_out_with_a_note(tmp_path: Path) -> None:
    path = _rebuilt_metrics(
        tmp_path,
        "key, value, timestamp, run_uuid, step, is_nan",
        "SELECT key, CASE WHEN step = 7 THEN 'abc' ELSE value END, timestamp, run_uuid,"
        " CASE WHEN step = 8 THEN 'x' WHEN step = 9 THEN 9e999 ELSE step END, is_nan"
        " FROM old_metrics",
    )
    with choosing_run("healthy"):
        case, run = analyze_run(path)
    steps = run.series(LOSS)[0].tolist()
    assert 7 not in steps and 8 not in steps and len(steps) == 297
    assert any("not a number" in p.problem for p in case.partial)


def test_values_logged_without_a_step_are_numbered_in_order(tmp_path: Path) -> None:
    # mlflow.log_metric(key, value) with no step stores step 0 for every value.
    path = _rebuilt_metrics(
        tmp_path,
        "key, value, timestamp, run_uuid, step, is_nan",
        "SELECT key, value, timestamp, run_uuid, 0, is_nan FROM old_metrics",
    )
    with choosing_run("healthy"):
        case, run = analyze_run(path)
    assert run.series(LOSS)[0].tolist() == list(range(300))
    assert any(c.kind == "mlflow_unstepped" for c in case.caveats)


def test_run_is_refused_where_no_store_of_several_runs_was_read(tmp_path: Path) -> None:
    from tscope.commands import AnalyzeRequest, analyze
    from tscope.errors import UsageError

    run = (
        Path(__file__).resolve().parents[1]
        / "fixtures/data/mlflow/filestore/933699634133149499/e0722abb3cfc46d5854435a259a4edbd"
    )
    with pytest.raises(UsageError, match="--run"):
        analyze(AnalyzeRequest([run], out=tmp_path / "case", run="healthy"))


def test_cluster_compares_the_runs_of_a_store(tmp_path: Path) -> None:
    """`tscope cluster mlflow.db`: each run of the store is a run of the sweep, named by its run
    name; the run logged with an LR jump blew up, its params tell it apart."""
    from tscope.cluster_pipeline import cluster

    store = _store(tmp_path)
    report = cluster(store, tmp_path / "cluster", jobs=1)
    statuses = {p.name: p.status for p in report.profiles}
    assert statuses["healthy"] == "stable" and statuses["lr_jump"] == "unstable"
    again = cluster(store, tmp_path / "cluster", jobs=1)  # the cached cases, per run
    assert all(p.reused_case for p in again.profiles)
    assert {p.name: p.status for p in again.profiles} == statuses


def test_a_process_reads_a_store_once_for_all_its_runs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`tscope cluster mlflow.db` reads one run per task: each once read, deserialized and
    scanned the whole store (a 200 MB store of 100 runs: 46 s, red team round 8; now 1.3 s)."""
    from tscope.ingest import safe_fs
    from tscope.ingest.base import choosing_run
    from tscope.ingest.readers import mlflow_sqlite_store
    from tscope.ingest.readers.mlflow_sqlite import MlflowSqliteReader, store_runs

    reads: list[str] = []

    def counted(path: Path, shown: str, limit: int) -> bytes:
        reads.append(shown)
        return safe_fs.read_bytes_bounded(path, shown, limit)

    monkeypatch.setattr(mlflow_sqlite_store, "read_bytes_bounded", counted)
    monkeypatch.setattr(mlflow_sqlite_store, "_KEEP", [False])
    mlflow_sqlite_store._forget()
    path = _store(tmp_path)
    store_runs(path, "mlflow.db")
    store_runs(path, "mlflow.db")
    assert reads == ["mlflow.db", "mlflow.db"]  # a plain process keeps no store after a read
    reads.clear()
    mlflow_sqlite_store.keep_last_store()  # what a cluster worker asks for
    runs = store_runs(path, "mlflow.db")
    assert len(runs) >= 2
    losses = []
    for run_id, _ in runs:
        with choosing_run(run_id):
            read = MlflowSqliteReader().read(path, "mlflow.db")
        losses.append(read.metrics.value.sum())
    assert reads == ["mlflow.db"]
    assert len(set(losses)) == len(runs)  # each read its own run's points
    path.write_bytes(path.read_bytes() + b"\0" * 512)  # a changed file is read again
    store_runs(path, "mlflow.db")
    assert reads == ["mlflow.db", "mlflow.db"]
    mlflow_sqlite_store._forget()
