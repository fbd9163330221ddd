"""MLflow's file store: a run folder `mlruns/<experiment>/<run>/` read as one run.

MLflow's FileStore (mlflow/store/tracking/file_store.py; mlflow 3.17.2 still writes it when
MLFLOW_ALLOW_FILE_STORE is set or ./mlruns already holds runs) keeps, per run folder:

    meta.yaml            run_id, run_name, status, start_time, artifact_uri, …
    metrics/<key>        one line per logged value: `<timestamp ms> <value> <step>` (`nan`, `inf`,
                         `-inf` as Python prints them; `… <dataset name> <digest>` with a dataset);
                         a key holding `/` (`train/loss`) is a sub-folder path
    params/<key>         the value's text, no newline
    tags/<key>           the same for tags

The run is claimed through its meta.yaml and read whole, so that its series are named together:
the HF Trainer's MLflowCallback logs `loss` every step and `train_loss` (the run's mean) once at
the end, and both spell the training loss; the key with the most lines keeps the canonical name,
the others their own (table_columns.unique_metric_names, as for a table's columns). Params become
the run's config. An experiment folder of several runs gives one read per run, which run grouping
keeps apart (the same series in two run folders).
"""

from __future__ import annotations

import re
from array import array
from pathlib import Path

import numpy as np

from tscope.errors import UnreadableInput
from tscope.ingest.base import inside_input, read_head
from tscope.ingest.logs.names import canonical_metrics, names_a_known_series
from tscope.ingest.logs.table_columns import unique_metric_names
from tscope.ingest.readers.text_logs import iter_lines, parse_config_value
from tscope.ingest.safe_fs import read_bytes_bounded
from tscope.model import Caveat, LogRead, PartialInput
from tscope.model.metric_rows import MAX_POINTS_PER_FILE, MetricRows

RUN_META = "meta.yaml"
METRICS_FOLDER = "metrics"
PARAMS_FOLDER = "params"
# A run folder's meta.yaml names its run_id (the experiment's own meta.yaml names none); a
# deleted run says so and may sit under the store's .trash/.
# A run's meta.yaml names it by `run_id:`; MLflow before 0.9 wrote only `run_uuid:` (later ones
# write both), and a run folder of such a store was "no supported log".
_RUN_META_KEYS = (b"run_id:", b"run_uuid:")
_DELETED = b"lifecycle_stage: deleted"
TRASH_FOLDER = ".trash"
# Bounds on what one run folder may make tscope read: MLflow caps a key at 250 characters and a
# param value at 6,000 (mlflow 2) or 8,000 (mlflow 3); the Trainer logs ~150 params and ~10 keys.
MAX_KEYS = 10_000
MAX_PARAMS = 2_000
MAX_PARAM_CHARACTERS = 8_000
MAX_PARAM_BYTES = 4 * MAX_PARAM_CHARACTERS  # UTF-8
# All params together, as they go into the case's config.
MAX_PARAMS_TOTAL_BYTES = 1024 * 1024
_INT64_LOW, _INT64_HIGH = -(2**63), 2**63 - 1
# `<timestamp> <value> [<step> [<dataset name> <dataset digest>]]` (MLflow before 1.0: no step).
_METRIC_LINE = re.compile(
    r"^(?P<time>\d{1,16}) (?P<value>[-+]?(?:\d+(?:\.\d*)?(?:[eE][-+]?\d+)?|\.\d+(?:[eE][-+]?\d+)?"
    r"|nan|inf|infinity))"
    r"(?: (?P<step>-?\d{1,19})(?: \S+ \S+)?)?\s*$",
    re.IGNORECASE,
)


class MlflowRunReader:
    name = "mlflow_run"

    def can_read(self, path: Path) -> bool:
        if path.name != RUN_META or not (path.parent / METRICS_FOLDER).is_dir():
            return False
        if TRASH_FOLDER in path.parts:  # runs deleted with `mlflow gc` pending
            return False
        head = read_head(path, 64 * 1024)
        return any(key in head for key in _RUN_META_KEYS) and _DELETED not in head

    def read(self, path: Path, display_path: str) -> LogRead:
        run = path.parent
        shown_run = display_path[: -len(RUN_META)] or "./"
        keys = _files_below(run / METRICS_FOLDER, MAX_KEYS + 1)
        if not keys:
            raise UnreadableInput(display_path, "an MLflow run folder with no metric file")
        problems: list[str] = []
        if len(keys) > MAX_KEYS:
            keys = known_first(run_metric_names(keys))[:MAX_KEYS]
            problems.append(f"more than {MAX_KEYS:,} metric keys: the first {MAX_KEYS:,} read")
        names = run_metric_names(sorted(keys, key=lambda key: -_size(run / METRICS_FOLDER / key)))
        rows = MetricRows()
        unstepped_keys: list[str] = []
        for key in known_first(names):
            try:
                problem, numbered = _read_metric(
                    run / METRICS_FOLDER / key, shown_run, key, names[key], rows
                )
            except UnreadableInput as error:
                problem, numbered = error.problem_text, False
            if numbered:
                unstepped_keys.append(key)
            if problem:
                problems.append(f"metrics/{key}: {problem}")
            if rows.full:
                break
        config = _params(run / PARAMS_FOLDER, shown_run, problems)
        if not rows:
            raise UnreadableInput(display_path, "the MLflow run's metric files hold no values")
        problems.extend(rows.problems())
        return LogRead(
            kind=self.name,
            path=display_path,
            metrics=rows.to_table(display_path),
            caveats=unstepped_caveats(unstepped_keys, display_path),
            config=config,
            partial=[PartialInput(display_path, problem) for problem in problems],
        )


def run_metric_names(keys_most_first: list[str]) -> dict[str, str]:
    """The series name of each of a run's metric keys, the key with the most values first: it
    keeps the canonical name another key shares (the Trainer's per-step `loss` over its one-point
    `train_loss`); the others keep their own (table_columns.unique_metric_names)."""
    canonical = canonical_metrics(keys_most_first)
    return dict(unique_metric_names(list(zip(keys_most_first, canonical, strict=True))))


def _files_below(folder: Path, limit: int) -> list[str]:
    """The `/`-joined paths of the regular files below `folder` (no link followed), in name order."""
    # Imported here: discovery imports the reader registry, which imports this module.
    from tscope.ingest.discover import iter_files

    if not folder.is_dir() or folder.is_symlink() or not inside_input(folder):
        return []
    found = []
    for file in iter_files(folder):
        found.append(file.relative_to(folder).as_posix())
        if len(found) >= limit:
            break
    return found


def _size(path: Path) -> int:
    try:
        return path.lstat().st_size
    except OSError:
        return 0


def _read_metric(
    path: Path, shown_run: str, key: str, name: str, rows: MetricRows
) -> tuple[str, bool]:
    """Add the metric file's values to `rows`: (what was wrong with it, "" when nothing; whether
    its values were numbered for want of steps)."""
    malformed = 0
    # Typed arrays, not a tuple per line: a 20 MB file of 5M points held 1.1 GB as tuples.
    times, steps, values = array("q"), array("q"), array("d")
    for line in iter_lines(path, f"{shown_run}metrics/{key}"):
        if len(values) >= MAX_POINTS_PER_FILE:
            break
        match = _METRIC_LINE.match(line)
        if match is None:
            malformed += line.strip() != ""
            continue
        step = int(match["step"]) if match["step"] is not None else 0
        times.append(int(match["time"]))
        steps.append(step if _INT64_LOW <= step <= _INT64_HIGH else -1)  # -1: dropped by rows
        values.append(float(match["value"]))
    # In logging order, as the SQLite store's reader reads them (ORDER BY timestamp, step): the
    # file's line order is not it. The Trainer's MLflowCallback logs with synchronous=False
    # (mlflow ≥ 2.8), whose queue appends lines out of order (steps 10, 40, 20), which read as
    # dozens of resumes. A real resume re-logs its steps later, so it keeps its place.
    step_array = np.frombuffer(steps, dtype=np.int64)
    order = np.lexsort((step_array, np.frombuffer(times, dtype=np.int64)))  # stable
    ordered_steps = step_array[order].tolist()
    ordered_values = np.frombuffer(values, dtype=np.float64)[order].tolist()
    numbered = unstepped(ordered_steps)
    for index, (step, value) in enumerate(zip(ordered_steps, ordered_values, strict=True)):
        if rows.full:
            break
        rows.add(index if numbered else step, name, value, key)
    problem = f"{malformed} lines that are not `<timestamp> <value> <step>`" if malformed else ""
    return problem, numbered


# MLflow's log_metric without a step stores step 0 for every value (and files before MLflow 1.0
# have no step): such a key's values are numbered in logged order instead of all at step 0.
UNSTEPPED = "logged without a step (all at step 0): its values are numbered in logged order"


def unstepped(steps: list[int]) -> bool:
    return len(steps) > 1 and min(steps) == max(steps)


def unstepped_caveats(keys: list[str], source: str) -> list[Caveat]:
    if not keys:
        return []
    shown = ", ".join(keys[:5]) + (f" and {len(keys) - 5} more" if len(keys) > 5 else "")
    return [
        Caveat("mlflow_unstepped", f"{shown}: {UNSTEPPED}; the step axis is their order.", source)
    ]


def known_first(names: dict[str, str]) -> list[str]:
    """A run's metric keys (key -> series name), the known series first, then by name: the point
    and key caps are shared by the run's keys, so they cut the others."""
    return sorted(names, key=lambda key: (not names_a_known_series(names[key]), key))


def _params(folder: Path, shown_run: str, problems: list[str]) -> dict[str, object]:
    config: dict[str, object] = {}
    total = 0
    for key in _files_below(folder, MAX_PARAMS):
        shown = f"{shown_run}params/{key}"
        try:
            raw = read_bytes_bounded(folder / key, shown, MAX_PARAM_BYTES)
        except UnreadableInput as error:
            problems.append(f"params/{key}: {error.problem_text}")
            continue
        total += len(raw)
        if total > MAX_PARAMS_TOTAL_BYTES:
            problems.append(f"params beyond {MAX_PARAMS_TOTAL_BYTES:,} bytes in all left out")
            break
        config[key] = parse_config_value(raw.decode("utf-8", "replace"))
    return config
