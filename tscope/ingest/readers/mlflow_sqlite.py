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
from collections.abc import Iterator
from pathlib import Path

from tscope.errors import UnreadableInput
from tscope.ingest.base import chosen_run, read_head
from tscope.ingest.logs.series_cap import columns_to_read
from tscope.ingest.readers.mlflow_files import (
    MAX_KEYS,
    MAX_PARAM_CHARACTERS,
    known_first,
    run_metric_names,
    unstepped,
    unstepped_caveats,
)
from tscope.ingest.readers.mlflow_sqlite_store import opened_store
from tscope.ingest.readers.text_logs import parse_config_value
from tscope.model import Caveat, LogRead, PartialInput
from tscope.model.metric_rows import MAX_POINTS_PER_FILE, MetricRows

SQLITE_MAGIC = b"SQLite format 3\x00"
SUFFIXES = (".db", ".sqlite", ".sqlite3")
DEFAULT_STORE_NAME = "mlflow.db"
# MLflow's schema names these tables on the first pages (sqlite_master); the sniff reads this much.
SCHEMA_SNIFF_BYTES = 256 * 1024
_SCHEMA_MARKS = (b"latest_metrics", b"experiments")
TABLES = ("runs", "metrics", "params")
MAX_PARAMS = 2_000
# How MLflow stores ±inf (sys.float_info.max).
_STORED_INF = 1.7976931348623157e308
RUNS_LISTED = 10


class MlflowSqliteReader:
    name = "mlflow_sqlite"

    def can_read(self, path: Path) -> bool:
        if not path.name.lower().endswith(SUFFIXES):
            return False
        head = read_head(path, SCHEMA_SNIFF_BYTES)
        if not head.startswith(SQLITE_MAGIC):
            return False
        # A store upgraded by `mlflow db upgrade` after it held data lists its tables past the
        # sniffed bytes: MLflow's own file name is enough (read() checks the tables).
        return path.name == DEFAULT_STORE_NAME or all(mark in head for mark in _SCHEMA_MARKS)

    def read(self, path: Path, display_path: str) -> LogRead:
        if not hasattr(sqlite3.Connection, "deserialize"):
            raise UnreadableInput(
                display_path, "reading an MLflow SQLite store needs Python 3.11 or later"
            )
        try:
            with opened_store(path, display_path, _check_tables) as store:
                return _read_run(store, display_path)
        except (sqlite3.Error, UnicodeDecodeError) as error:
            raise UnreadableInput(
                display_path, f"not a readable MLflow SQLite store ({str(error)[:200]})"
            ) from error


def store_runs(path: Path, display_path: str) -> list[tuple[str, str]]:
    """(run id, run name) of each active run with metrics in an MLflow SQLite store, by start
    time: what `tscope cluster mlflow.db` compares. UnreadableInput when it is not one."""
    if not hasattr(sqlite3.Connection, "deserialize"):
        raise UnreadableInput(display_path, "reading an MLflow SQLite store needs Python 3.11+")
    try:
        with opened_store(path, display_path, _check_tables) as store:
            return [(str(run_id), str(name)) for run_id, name, _ in _runs(store)]
    except (sqlite3.Error, UnicodeDecodeError) as error:
        raise UnreadableInput(
            display_path, f"not a readable MLflow SQLite store ({str(error)[:200]})"
        ) from error


def _runs(store: sqlite3.Connection) -> list[tuple[object, object, object]]:
    return store.execute(
        "SELECT run_uuid, name, start_time FROM runs WHERE lifecycle_stage = 'active' "
        "AND run_uuid IN (SELECT DISTINCT run_uuid FROM metrics) ORDER BY start_time"
    ).fetchall()


def _check_tables(store: sqlite3.Connection, display_path: str) -> None:
    schema = {
        str(name): (str(kind), str(sql or ""))
        for name, kind, sql in store.execute(
            "SELECT name, type, sql FROM sqlite_master WHERE name IN (?, ?, ?)", TABLES
        ).fetchall()
    }
    for table in TABLES:
        kind, sql = schema.get(table, ("", ""))
        # A view, a virtual table (fts, a module's) or a computed column runs code on a read.
        computed = (
            any(hidden for *_, hidden in store.execute(f"PRAGMA table_xinfo({table})").fetchall())
            if kind == "table"
            else True
        )
        if kind != "table" or sql.lstrip().upper().startswith("CREATE VIRTUAL") or computed:
            raise UnreadableInput(
                display_path,
                "not an MLflow store (its runs, metrics and params must be plain tables)",
            )


def _read_run(store: sqlite3.Connection, display_path: str) -> LogRead:
    runs = _runs(store)
    if not runs:
        raise UnreadableInput(display_path, "the MLflow store holds no run with metrics")
    run_id, run_name = _chosen(runs, display_path)
    counts = store.execute(
        "SELECT key, COUNT(*) FROM metrics WHERE run_uuid = ? GROUP BY key ORDER BY 2 DESC, 1",
        (run_id,),
    ).fetchall()
    logged = [str(key) for key, _ in counts]
    problems: list[str] = []
    if len(logged) > MAX_KEYS:
        # Capped before naming (canonical_metrics): naming 1,000,000 keys took 8 s and 330 MB.
        problems.append(
            f"{len(logged) - MAX_KEYS:,} of the run's {len(logged):,} metric keys not read: "
            f"tscope reads at most {MAX_KEYS:,} (the step and loss-like ones first)"
        )
        logged = columns_to_read(logged, MAX_KEYS)
    names = run_metric_names(logged)
    points = {str(key): int(count) for key, count in counts if str(key) in names}
    del counts, logged
    rows = MetricRows()
    untyped = 0
    negative = 0  # rows with a step below 0: MetricRows would call them "beyond 2**53"
    unstepped_keys: list[str] = []
    for batch in _batches(known_first(names), points, _most_parameters(store)):
        read, untyped_rows = _points_of(store, run_id, batch)
        untyped += untyped_rows
        for key in batch:
            steps, values = read.pop(key, ([], []))
            numbered = unstepped(steps)
            if numbered:
                unstepped_keys.append(key)
            for index, (step, number) in enumerate(zip(steps, values, strict=True)):
                if step < 0 and not numbered:
                    negative += 1
                    continue
                rows.add(index if numbered else step, names[key], number, key)
            if rows.full:
                break
        if rows.full:
            break
    params = store.execute(
        "SELECT key, value FROM params WHERE run_uuid = ? AND length(value) <= ? LIMIT ?",
        (run_id, MAX_PARAM_CHARACTERS, MAX_PARAMS),
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
    problems.extend(rows.problems())
    if negative:
        problems.append(
            f"{negative} metric row(s) with a negative step left out: mlflow.log_metric steps "
            "count up from 0"
        )
    if untyped:
        problems.append(f"{untyped} metric rows whose step or value is not a number left out")
    return LogRead(
        kind="mlflow_sqlite",
        path=display_path,
        metrics=rows.to_table(display_path),
        caveats=caveats + unstepped_caveats(unstepped_keys, display_path),
        config={str(key): parse_config_value(str(value)) for key, value in params},
        partial=[PartialInput(display_path, problem) for problem in problems],
    )


def _most_parameters(store: sqlite3.Connection) -> int:
    """How many keys one query may name (SQLite's limit on bound parameters, 32,766 since 3.32)."""
    return max(1, min(MAX_KEYS, store.getlimit(sqlite3.SQLITE_LIMIT_VARIABLE_NUMBER) - 2))


def _batches(keys: list[str], points: dict[str, int], most: int) -> Iterator[list[str]]:
    """The keys in reading order, in batches that hold about MAX_POINTS_PER_FILE points at most
    (a key over it alone) and at most `most` keys: each batch is one query, one scan of the
    metrics table (a store need have no index: a query per key was keys x rows)."""
    batch: list[str] = []
    held = 0
    for key in keys:
        size = min(points.get(key, 0), MAX_POINTS_PER_FILE + 1)
        if batch and (held + size > MAX_POINTS_PER_FILE + 1 or len(batch) >= most):
            yield batch
            batch, held = [], 0
        batch.append(key)
        held += size
    if batch:
        yield batch


def _points_of(
    store: sqlite3.Connection, run_id: str, keys: list[str]
) -> tuple[dict[str, tuple[list[int], list[float]]], int]:
    """Each key's steps and values in the order logged (timestamp, then step), from at most
    MAX_POINTS_PER_FILE + 1 rows per key, and how many rows were left out for a step or a value
    that is not a number."""
    marks = ", ".join("?" * len(keys))
    query = store.execute(
        "SELECT key, step, value, is_nan FROM (SELECT key, step, value, is_nan, ROW_NUMBER() "
        "OVER (PARTITION BY key ORDER BY timestamp, step) AS n FROM metrics "
        f"WHERE run_uuid = ? AND key IN ({marks})) WHERE n <= ? ORDER BY key, n",
        (run_id, *keys, MAX_POINTS_PER_FILE + 1),
    )
    read: dict[str, tuple[list[int], list[float]]] = {}
    untyped = 0
    for key, step, value, is_nan in query:
        number = _value(value, is_nan)
        if not isinstance(step, int) or number is None:
            untyped += 1
            continue
        steps, values = read.setdefault(str(key), ([], []))
        steps.append(step)
        values.append(number)
    return read, untyped


def _chosen(runs: list[tuple[object, object, object]], display_path: str) -> tuple[str, str]:
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


def _value(value: object, is_nan: object) -> float | None:
    """The logged number (NaN where is_nan; MLflow's ±1.797e308 as ±inf), None for a value of
    another type (a crafted store's text or blob)."""
    if is_nan == 1:
        return math.nan
    if not isinstance(value, (int, float)) or isinstance(value, bool):
        return None
    number = float(value)
    if abs(number) >= _STORED_INF:
        return math.copysign(math.inf, number)
    return number
