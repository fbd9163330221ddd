"""MLflow's file store: `mlruns/<experiment>/<run>/metrics/<key>` and `params/<key>`.

MLflow's FileStore (mlflow/store/tracking/file_store.py) keeps one file per metric key under the
run's `metrics/` folder, one line per logged value: `<timestamp ms> <value> <step>` (`nan`,
`inf`, `-inf` as Python prints them). A key holding `/` (`train/loss`) is a sub-folder path. Each
parameter is a file under `params/` holding the value's text. The run folder holds `meta.yaml`.
The HF Trainer's MLflowCallback logs `loss`, `grad_norm`, `learning_rate`, `eval_loss`;
Lightning's MLFlowLogger and own loops whatever names they are given (names.canonical_metric).

One reader per file kind: every metric file is one series, every parameter file one config
entry; discovery and run_groups put a run's files together (and keep two runs of one
experiment apart: the same series in two run folders).
"""

from __future__ import annotations

import re
from pathlib import Path

from tscope.errors import UnreadableInput
from tscope.ingest.base import inside_input, read_head
from tscope.ingest.logs.names import canonical_metric
from tscope.ingest.readers.text_logs import iter_lines, parse_config_value
from tscope.ingest.safe_fs import is_regular_file, read_bytes_bounded
from tscope.model import LogRead, PartialInput
from tscope.model.metric_rows import MetricRows

METRICS_FOLDER = "metrics"
PARAMS_FOLDER = "params"
RUN_META = "meta.yaml"
# How deep a key's `/`-separated parts may nest below metrics/ (MLflow caps a key at 250
# characters; real keys have 1-4 parts).
MAX_KEY_PARTS = 16
# A parameter value is at most 6,000 characters in MLflow 2 (8,000 in 3); a larger file is not one.
MAX_PARAM_BYTES = 64 * 1024
# `<timestamp> <value> <step>`; files of MLflow before 1.0 have no step.
_METRIC_LINE = re.compile(
    r"^(?P<time>\d{1,16}) (?P<value>[-+]?(?:[\d.]+(?:[eE][-+]?\d+)?|nan|inf|infinity))"
    r"(?: (?P<step>-?\d{1,19}))?\s*$",
    re.IGNORECASE,
)


def _run_key(path: Path, folder: str) -> tuple[Path, str] | None:
    """(the run folder, the key) when `path` sits under `<run>/<folder>/` of an MLflow run (the
    run folder holds meta.yaml, inside the input); None otherwise."""
    parts = path.parts
    for depth in range(2, min(MAX_KEY_PARTS + 1, len(parts))):
        if parts[-depth] != folder:
            continue
        run = path.parents[depth - 1]
        meta = run / RUN_META
        if inside_input(meta) and is_regular_file(meta):
            return run, "/".join(parts[-depth + 1 :])
        return None
    return None


class MlflowMetricReader:
    name = "mlflow_metrics"

    def can_read(self, path: Path) -> bool:
        if _run_key(path, METRICS_FOLDER) is None:
            return False
        first_line = read_head(path, 256).split(b"\n", 1)[0]
        return _METRIC_LINE.match(first_line.decode("ascii", "replace")) is not None

    def read(self, path: Path, display_path: str) -> LogRead:
        found = _run_key(path, METRICS_FOLDER)
        if found is None:
            raise UnreadableInput(display_path, "not an MLflow metric file")
        key = found[1]
        series = canonical_metric(key)
        rows = MetricRows()
        malformed = 0
        for line in iter_lines(path, display_path):
            if rows.full:
                break
            match = _METRIC_LINE.match(line)
            if match is None:
                malformed += line.strip() != ""
                continue
            step = int(match["step"]) if match["step"] is not None else 0
            rows.add(step, series, float(match["value"]), key)
        if not rows:
            raise UnreadableInput(
                display_path, "an MLflow metric file with no `<timestamp> <value> <step>` line"
            )
        problems = rows.problems()
        if malformed:
            problems.append(f"{malformed} lines that are not `<timestamp> <value> <step>` skipped")
        return LogRead(
            kind=self.name,
            path=display_path,
            metrics=rows.to_table(display_path),
            partial=[PartialInput(display_path, problem) for problem in problems],
        )


class MlflowParamsReader:
    """A parameter file: one config entry (`learning_rate` → 0.001) for the run's config."""

    name = "mlflow_params"

    def can_read(self, path: Path) -> bool:
        return _run_key(path, PARAMS_FOLDER) is not None

    def read(self, path: Path, display_path: str) -> LogRead:
        found = _run_key(path, PARAMS_FOLDER)
        if found is None:
            raise UnreadableInput(display_path, "not an MLflow parameter file")
        text = read_bytes_bounded(path, display_path, MAX_PARAM_BYTES).decode("utf-8", "replace")
        return LogRead(
            kind=self.name, path=display_path, config={found[1]: parse_config_value(text)}
        )
