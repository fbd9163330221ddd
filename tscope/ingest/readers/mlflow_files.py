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
from pathlib import Path

from tscope.errors import UnreadableInput
from tscope.ingest.base import inside_input, read_head
from tscope.ingest.logs.names import canonical_metrics
from tscope.ingest.logs.table_columns import unique_metric_names
from tscope.ingest.readers.text_logs import iter_lines, parse_config_value
from tscope.ingest.safe_fs import read_bytes_bounded
from tscope.model import LogRead, PartialInput
from tscope.model.metric_rows import MetricRows

RUN_META = "meta.yaml"
METRICS_FOLDER = "metrics"
PARAMS_FOLDER = "params"
# A run folder's meta.yaml names its run_id (the experiment's own meta.yaml names none).
_RUN_META_KEYS = (b"run_id:",)
# Bounds on what one run folder may make tscope read: MLflow caps a key at 250 characters and a
# param value at 6,000 (mlflow 2) or 8,000 (mlflow 3); the Trainer logs ~150 params and ~10 keys.
MAX_KEYS = 10_000
MAX_PARAMS = 10_000
MAX_PARAM_BYTES = 64 * 1024
# `<timestamp> <value> [<step> [<dataset name> <dataset digest>]]` (MLflow before 1.0: no step).
_METRIC_LINE = re.compile(
    r"^(?P<time>\d{1,16}) (?P<value>[-+]?(?:[\d.]+(?:[eE][-+]?\d+)?|nan|inf|infinity))"
    r"(?: (?P<step>-?\d{1,19})(?: \S+ \S+)?)?\s*$",
    re.IGNORECASE,
)


class MlflowRunReader:
    name = "mlflow_run"

    def can_read(self, path: Path) -> bool:
        if path.name != RUN_META or not (path.parent / METRICS_FOLDER).is_dir():
            return False
        head = read_head(path, 64 * 1024)
        return all(key in head for key in _RUN_META_KEYS)

    def read(self, path: Path, display_path: str) -> LogRead:
        run = path.parent
        shown_run = display_path[: -len(RUN_META)] or "./"
        keys = _files_below(run / METRICS_FOLDER, MAX_KEYS)
        if not keys:
            raise UnreadableInput(display_path, "an MLflow run folder with no metric file")
        names = run_metric_names(sorted(keys, key=lambda key: -_size(run / METRICS_FOLDER / key)))
        rows = MetricRows()
        problems: list[str] = []
        for key in keys:
            malformed = _read_metric(run / METRICS_FOLDER / key, shown_run, key, names[key], rows)
            if malformed:
                problems.append(
                    f"metrics/{key}: {malformed} lines that are not `<timestamp> <value> <step>`"
                )
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


def _read_metric(path: Path, shown_run: str, key: str, name: str, rows: MetricRows) -> int:
    """Add the metric file's values to `rows`; the number of malformed lines."""
    malformed = 0
    for line in iter_lines(path, f"{shown_run}metrics/{key}"):
        if rows.full:
            break
        match = _METRIC_LINE.match(line)
        if match is None:
            malformed += line.strip() != ""
            continue
        step = int(match["step"]) if match["step"] is not None else 0
        rows.add(step, name, float(match["value"]), key)
    return malformed


def _params(folder: Path, shown_run: str, problems: list[str]) -> dict[str, object]:
    config: dict[str, object] = {}
    for key in _files_below(folder, MAX_PARAMS):
        shown = f"{shown_run}params/{key}"
        try:
            raw = read_bytes_bounded(folder / key, shown, MAX_PARAM_BYTES)
        except UnreadableInput as error:
            problems.append(error.problem_text)
            continue
        config[key] = parse_config_value(raw.decode("utf-8", "replace"))
    return config
