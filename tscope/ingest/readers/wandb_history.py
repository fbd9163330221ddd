"""W&B history dumps: what `run.history()` / `run.scan_history()` return, saved as CSV/JSON/JSONL.

Users save them with `df.to_csv(...)`, `df.to_json(...)` or one `json.dumps(row)` per line; the
mark of all of them is W&B's `_step` column (with `_runtime` and `_timestamp`, the other reserved
keys). `scan_history` rows are sparse and `history()` frames have empty cells where a key was not
logged: a missing cell is "not logged", never zero. pandas writes a logged NaN as an empty CSV
cell and a null JSON value, so a NaN in a pandas-written dump reads as "not logged" (nothing in
the file tells the two apart).

The step: integrations log the optimizer step as a metric and `_step` counts log calls (the
Hugging Face callback logs `train/global_step`, Lightning `trainer/global_step`). When such a
column is present it is the step and rows without it are skipped; otherwise `_step` is.
`_timestamp`'s first value orders several dumps of one resumed run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

from tscope.errors import UnreadableInput
from tscope.ingest.logs.table_columns import (
    canonical_column_names,
    find_column,
    is_bookkeeping_column,
    sniff_columns,
    to_long_form,
)
from tscope.ingest.logs.tabular import read_table
from tscope.ingest.readers.wandb_export import is_wandb_export
from tscope.model import Caveat, LogRead, PartialInput

WANDB_STEP_KEY = "_step"
# Optimizer-step metrics that integrations log next to W&B's `_step` (which counts log calls).
GLOBAL_STEP_KEYS = ("trainer/global_step", "train/global_step", "global_step")
WANDB_TIMESTAMP_KEY = "_timestamp"
# Reserved keys (WB apis/public/runs.py) and the internal `_wandb.*` namespace: not metrics.
WANDB_RESERVED_KEYS = frozenset({"_step", "_runtime", "_timestamp"})
WANDB_INTERNAL_PREFIX = "_wandb"
# `run.history()` returns a sample of samples=500 rows by default (WB apis/public/runs.py).
HISTORY_DEFAULT_SAMPLES = 500


def is_wandb_history(columns: list[str]) -> bool:
    return WANDB_STEP_KEY in columns and not is_wandb_export(columns)


def is_wandb_metric_key(key: str) -> bool:
    """A user metric, not a reserved key, an internal key or a step counter."""
    return (
        key not in WANDB_RESERVED_KEYS
        and not key.startswith(WANDB_INTERNAL_PREFIX)
        and key.lower() not in GLOBAL_STEP_KEYS
    )


class WandbHistoryReader:
    name = "wandb_history"

    def can_read(self, path: Path) -> bool:
        columns = sniff_columns(path)
        return columns is not None and is_wandb_history(columns)

    def read(self, path: Path, display_path: str) -> LogRead:
        table = read_table(path, display_path)
        step_column = find_column(table.names, (*GLOBAL_STEP_KEYS, WANDB_STEP_KEY))
        if step_column is None:
            raise UnreadableInput(display_path, "the _step column holds no numbers")
        metric_columns = [
            name
            for name in table.names
            if name != step_column and is_wandb_metric_key(name) and not is_bookkeeping_column(name)
        ]
        if not metric_columns:
            raise UnreadableInput(display_path, "no numeric metric column besides W&B's own keys")
        pairs = canonical_column_names(metric_columns)
        metrics, step_problems = to_long_form(table, step_column, pairs, display_path)
        if metrics.empty:
            raise UnreadableInput(display_path, "no metric value has a usable step")

        caveats = []
        if table.n_rows == HISTORY_DEFAULT_SAMPLES:
            caveats.append(
                Caveat(
                    "sampled_history",
                    f"{display_path} has exactly {HISTORY_DEFAULT_SAMPLES} rows, the default "
                    "sample of W&B's run.history(): steps between the sampled rows are missing "
                    "and a short spike may not be in the file. Dump run.scan_history() for "
                    "every row.",
                    display_path,
                )
            )
        return LogRead(
            kind=self.name,
            path=display_path,
            metrics=metrics,
            caveats=caveats,
            partial=[
                PartialInput(display_path, problem) for problem in table.problems + step_problems
            ],
            started_at=_first_timestamp(table.values, table.present),
        )


def _first_timestamp(values: dict[str, np.ndarray], present: dict[str, np.ndarray]) -> float | None:
    if WANDB_TIMESTAMP_KEY not in values:
        return None
    logged = values[WANDB_TIMESTAMP_KEY][present[WANDB_TIMESTAMP_KEY]]
    logged = logged[np.isfinite(logged)]
    return float(logged[0]) if logged.size else None
