"""MLflow's SQLite store (`mlflow.db`): the default tracking store of mlflow 3 (no tracking URI
set and no ./mlruns with runs in it: `sqlite:///mlflow.db`, mlflow/store/tracking/__init__.py).

Tables read (mlflow 3.17.2's schema): `runs` (run_uuid, name, status, start_time,
lifecycle_stage), `metrics` (key, value, timestamp, run_uuid, step, is_nan: NaN is stored as
value 0 with is_nan 1, ±inf as ±1.797e308) and `params` (key, value, run_uuid).

The file is a stranger's: its bytes are read (bounded) and deserialized into an in-memory
database, so SQLite never opens the path (no journal or WAL file is touched, no link followed);
the schema's objects must be plain tables (a crafted `metrics` view could run any query), the
connection is query-only with an untrusted schema, and every query runs under a work budget
that interrupts it. A store of several runs is read only for the run the user names
(`--run NAME_OR_ID`); without one, the reader lists them.
"""

from __future__ import annotations

import math
import sqlite3
from pathlib import Path

from tscope.errors import UnreadableInput
from tscope.ingest.base import chosen_run, read_head
from tscope.ingest.readers.mlflow_files import run_metric_names
from tscope.ingest.readers.text_logs import parse_config_value
from tscope.ingest.safe_fs import read_bytes_bounded
from tscope.model import Caveat, LogRead
from tscope.model.metric_rows import MAX_POINTS_PER_FILE, MetricRows

SQLITE_MAGIC = b"SQLite format 3\x00"
SUFFIXES = (".db", ".sqlite", ".sqlite3")
# MLflow's schema names these tables on the first pages (sqlite_master); the sniff reads this much.
SCHEMA_SNIFF_BYTES = 256 * 1024
_SCHEMA_MARKS = (b"latest_metrics", b"experiments")
# A store holding millions of points is a few hundred MB; memory is twice the file while read.
MAX_STORE_BYTES = 1024**3
TABLES = ("runs", "metrics", "params")
# SQLite virtual-machine steps between two checks of the budget, and the budget: a query over a
# real store takes ~10 steps a row.
_PROGRESS_EVERY = 10_000
_STEPS_PER_BYTE = 20
MAX_PARAMS = 10_000
# How MLflow stores ±inf (sys.float_info.max).
_STORED_INF = 1.7976931348623157e308
RUNS_LISTED = 10


class MlflowSqliteReader:
    name = "mlflow_sqlite"

    def can_read(self, path: Path) -> bool:
        if not path.name.lower().endswith(SUFFIXES):
            return False
        head = read_head(path, SCHEMA_SNIFF_BYTES)
        return head.startswith(SQLITE_MAGIC) and all(mark in head for mark in _SCHEMA_MARKS)

    def read(self, path: Path, display_path: str) -> LogRead:
        if not hasattr(sqlite3.Connection, "deserialize"):
            raise UnreadableInput(
                display_path, "reading an MLflow SQLite store needs Python 3.11 or later"
            )
        data = read_bytes_bounded(path, display_path, MAX_STORE_BYTES)
        try:
            with _store(data) as store:
                return _read_run(store, display_path)
        except sqlite3.Error as error:
            raise UnreadableInput(
                display_path, f"not a readable MLflow SQLite store ({str(error)[:200]})"
            ) from error


class _store:
    """The store's bytes as a query-only in-memory database under a work budget."""

    def __init__(self, data: bytes) -> None:
        self.connection = sqlite3.connect(":memory:")
        self.connection.deserialize(data)
        budget = [max(1, _STEPS_PER_BYTE * len(data) // _PROGRESS_EVERY)]

        def spend() -> int:
            budget[0] -= 1
            return 1 if budget[0] < 0 else 0  # non-zero interrupts the query

        self.connection.set_progress_handler(spend, _PROGRESS_EVERY)
        self.connection.execute("PRAGMA trusted_schema = OFF")
        self.connection.execute("PRAGMA query_only = ON")

    def __enter__(self) -> sqlite3.Connection:
        return self.connection

    def __exit__(self, *_: object) -> None:
        self.connection.close()


def _read_run(store: sqlite3.Connection, display_path: str) -> LogRead:
    kinds = dict(
        store.execute(
            "SELECT name, type FROM sqlite_master WHERE name IN (?, ?, ?)", TABLES
        ).fetchall()
    )
    if any(kinds.get(table) != "table" for table in TABLES):
        raise UnreadableInput(display_path, "not an MLflow store (no runs/metrics/params tables)")
    runs = store.execute(
        "SELECT run_uuid, name, start_time FROM runs WHERE lifecycle_stage = 'active' "
        "AND run_uuid IN (SELECT DISTINCT run_uuid FROM metrics) ORDER BY start_time"
    ).fetchall()
    if not runs:
        raise UnreadableInput(display_path, "the MLflow store holds no run with metrics")
    run_id, run_name = _chosen(runs, display_path)
    counts = store.execute(
        "SELECT key, COUNT(*) FROM metrics WHERE run_uuid = ? GROUP BY key ORDER BY 2 DESC, 1",
        (run_id,),
    ).fetchall()
    names = run_metric_names([str(key) for key, _ in counts])
    rows = MetricRows()
    query = store.execute(
        "SELECT key, step, value, is_nan FROM metrics WHERE run_uuid = ? "
        "ORDER BY key, timestamp, step LIMIT ?",
        (run_id, MAX_POINTS_PER_FILE + 1),
    )
    for key, step, value, is_nan in query:
        if rows.full:
            break
        rows.add(int(step), names[str(key)], _value(value, is_nan), str(key))
    params = store.execute(
        "SELECT key, value FROM params WHERE run_uuid = ? LIMIT ?", (run_id, MAX_PARAMS)
    ).fetchall()
    caveats = []
    if len(runs) > 1:
        caveats.append(
            Caveat(
                "mlflow_run_chosen",
                f"{display_path} holds {len(runs)} MLflow runs; this case is run {run_name!r} "
                f"({run_id}), chosen with --run.",
                display_path,
            )
        )
    return LogRead(
        kind="mlflow_sqlite",
        path=display_path,
        metrics=rows.to_table(display_path),
        caveats=caveats,
        config={str(key): parse_config_value(str(value)) for key, value in params},
        partial=[],
    )


def _chosen(runs: list[tuple[str, str, int]], display_path: str) -> tuple[str, str]:
    """(run id, run name) of the one run, or of the run --run names (its name or id prefix)."""
    wanted = chosen_run()
    if wanted is None and len(runs) == 1:
        return str(runs[0][0]), str(runs[0][1])
    if wanted is not None:
        matching = [r for r in runs if r[1] == wanted or str(r[0]).startswith(wanted)]
        if len(matching) == 1:
            return str(matching[0][0]), str(matching[0][1])
    listed = ", ".join(f"{name!r} ({str(run_id)[:8]})" for run_id, name, _ in runs[:RUNS_LISTED])
    more = f" and {len(runs) - RUNS_LISTED} more" if len(runs) > RUNS_LISTED else ""
    problem = (
        f"holds {len(runs)} MLflow runs with metrics: {listed}{more}"
        if wanted is None
        else f"no single MLflow run named {wanted!r} (or with an id starting so): {listed}{more}"
    )
    raise UnreadableInput(
        display_path, problem, "Name the run to analyze: tscope analyze PATH --run NAME_OR_ID"
    )


def _value(value: object, is_nan: object) -> float:
    if is_nan:
        return math.nan
    number = float(value)  # type: ignore[arg-type]
    if abs(number) >= _STORED_INF:
        return math.copysign(math.inf, number)
    return number
