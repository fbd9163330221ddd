"""Any metrics table a training script writes: CSV, TSV, JSON Lines, or a JSON list of records.

One row per logged point with a step column (`step`, `iter`, `iteration`, `global_step`,
`trainer/global_step`, ... matched case-insensitively) and numeric columns, e.g. the demo's
`{"step": 10, "train/loss": 2.3, "train/grad_norm": 0.8, "train/learning_rate": 3e-4}` lines.

* Every numeric column is a series under its canonical name (`train_loss` -> `train/loss`,
  `val_loss` -> `eval/loss`); unknown names keep their own. A second column mapping to an already
  used canonical name keeps its own name rather than merging two series.
* Wall-clock columns (`train_time_ms`, `wall_time`, `timestamp`) and the other step counters are
  left out: they are monotonic clocks, not training signals, and must not pose as metrics.
* A file holding one metric named after the file, below a `metrics/` folder (DVCLive's
  `plots/metrics/eval/loss.tsv`), is named by its folders too: `eval/loss`, not a second `loss`.
* Text columns (run ids, dates) are ignored; stray text in a numeric column is skipped and counted
  in `partial`. Rows stay in file order: duplicate or backwards steps are resolved by the assembly.

It declines W&B UI exports and W&B history dumps (their readers handle them and know what their
columns mean) and any table without a step column.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath

import numpy as np

from tscope.errors import UnreadableInput
from tscope.ingest.logs.names import canonical_metric
from tscope.ingest.logs.table_cells import ParsedTable
from tscope.ingest.logs.table_columns import (
    canonical_column_names,
    find_column,
    is_bookkeeping_column,
    sniff_columns,
    to_long_form,
)
from tscope.ingest.logs.tabular import read_table
from tscope.ingest.readers.wandb_export import is_wandb_export
from tscope.ingest.readers.wandb_history import is_wandb_history
from tscope.model import Caveat, LogRead, PartialInput, RunEvent
from tscope.model.metric_rows import MAX_STEP

# In preference order when a table has several: the most specific optimizer-step counter first.
# `_step` is W&B's own counter, handled by the history reader; it is listed for completeness.
STEP_COLUMNS = (
    "step",
    "global_step",
    "trainer/global_step",
    "train/global_step",
    "iteration",
    "iter",
    "_step",
)

# A table with no step counter but one row per epoch (Keras' CSVLogger: `epoch,loss,val_loss`,
# and the loops that copy it) is read on the epoch axis: "unknown format" before (healthy-run
# hunt, session 26).
EPOCH_COLUMNS = ("epoch",)
EPOCH_AXIS_CAVEAT = (
    "The table has no step column: it is read with one point per epoch, so the step axis counts "
    "epochs and a spike within an epoch is averaged away."
)


# DVCLive writes one file per metric, `dvclive/plots/metrics/<key>.tsv` (`timestamp step <name>`),
# the key's `/` parts as folders: `train/loss.tsv` and `eval/loss.tsv` both hold a `loss` column,
# which only the folders tell apart. At most this many folders below `metrics/` (real keys: 1-3).
PER_METRIC_FILE_ROOT = "metrics"
MAX_PER_METRIC_FOLDERS = 8


def _per_metric_file_folders(display_path: str, metric_columns: list[str]) -> str | None:
    """The folders between the nearest `metrics/` and a one-metric file named after its column
    ("eval" for dvclive/plots/metrics/eval/loss.tsv), within the input (its display path); None
    for a file right in `metrics/` and for any other table."""
    path = PurePosixPath(display_path)
    if len(metric_columns) != 1 or metric_columns[0] != path.stem:
        return None
    folders = path.parent.parts
    for depth in range(min(MAX_PER_METRIC_FOLDERS, len(folders))):
        if folders[-depth - 1] == PER_METRIC_FILE_ROOT:
            return "/".join(folders[len(folders) - depth :]) or None
    return None


class MetricsTableReader:
    name = "metrics_table"

    def can_read(self, path: Path) -> bool:
        columns = sniff_columns(path)
        if columns is None or _step_column(columns) is None:
            return False
        return not is_wandb_export(columns) and not is_wandb_history(columns)

    def read(self, path: Path, display_path: str) -> LogRead:
        table = read_table(path, display_path)
        step_column = _step_column(table.names)
        if step_column is None:
            raise UnreadableInput(
                display_path,
                f"no numeric step column (looked for {', '.join(STEP_COLUMNS)})",
                "Add a step column, or point tscope at the run's own logs",
            )
        step_like = {name.lower() for name in STEP_COLUMNS} | {step_column.strip().lower()}
        metric_columns = [
            name
            for name in table.names
            if name != step_column
            and name.strip().lower() not in step_like
            and not is_bookkeeping_column(name)
        ]
        if not metric_columns:
            raise UnreadableInput(display_path, "no numeric metric column next to the step column")
        pairs = canonical_column_names(metric_columns)
        if (split := _per_metric_file_folders(display_path, metric_columns)) is not None:
            pairs = [(metric_columns[0], canonical_metric(f"{split}/{metric_columns[0]}"))]
        metrics, step_problems = to_long_form(table, step_column, pairs, display_path)
        if metrics.empty:
            raise UnreadableInput(display_path, "no metric value has a usable step")
        problems = table.problems + step_problems
        by_epoch = step_column.strip().lower() in EPOCH_COLUMNS
        read = LogRead(
            kind=self.name,
            path=display_path,
            metrics=metrics,
            caveats=[Caveat("epoch_axis", EPOCH_AXIS_CAVEAT, display_path)] if by_epoch else [],
            partial=[PartialInput(display_path, problem) for problem in problems],
        )
        read.events.extend(_reopened(table, step_column, display_path))
        return read


# At most this many reopenings become resume events (each is judged over the log around it).
MAX_REOPENINGS = 20


def _reopened(table: ParsedTable, step_column: str, source: str) -> list[RunEvent]:
    """A resume where the header is written again while the steps run on: the loop reopened its
    CSV after a restart (a planted-cause hunt's plain loop, session 26, listed it only as skipped
    cells). Where the steps go back, the assembly finds the resume from them."""
    steps, present = table.values[step_column], table.present[step_column]
    events = []
    for row in sorted(table.header_rows)[:MAX_REOPENINGS]:
        before = np.flatnonzero(present[:row])
        after = np.flatnonzero(present[row + 1 :])
        if before.size == 0 or after.size == 0:
            continue
        last, following = float(steps[before[-1]]), float(steps[row + 1 + after[0]])
        if last < following < MAX_STEP:
            events.append(
                RunEvent(
                    "resume",
                    int(following),
                    f"the log's header is written again before step {int(following)}: the loop "
                    "reopened the file, as it does when the run is restarted",
                    source,
                )
            )
    return events


def _step_column(names: list[str]) -> str | None:
    """The step counter, else the epoch column of a table logged once per epoch."""
    return find_column(names, STEP_COLUMNS) or find_column(names, EPOCH_COLUMNS)
