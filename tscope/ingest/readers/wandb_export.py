"""A W&B line-plot panel exported from the web UI ("Export panel" -> CSV).

Header: the x-axis first (`Step` by default), then per run and metric three columns:
`"<run> - <metric>"`, `"<run> - <metric>__MIN"`, `"<run> - <metric>__MAX"`; grouped runs appear
as `"Group: <name> - <metric>"`. The run label is split from the metric at the *last* " - "
(run names are free text, metric names rarely hold " - ").

The export is the panel's view, not the log: the x-axis is bucketed, the main column holds the
last value per bucket and `__MIN`/`__MAX` the bucket's extremes (docs.wandb.ai line-plot
sampling). So a one-step spike can vanish from the main column while `__MAX` keeps it. Names:

* the main column  -> the canonical metric, e.g. `train/loss`;
* `__MIN` / `__MAX` -> the canonical metric with `__min` / `__max`, e.g. `train/loss__max`, the
  spike witness.

One file is one run: when an export holds several runs, the first run in column order is read and
the others are listed in `partial` (export each run on its own to analyze it). When the x-axis is
not a step (`epoch`, wall time), the run's own `"<run> - _step"` column is used if exported.
"""

from __future__ import annotations

from pathlib import Path

from tscope.errors import UnreadableInput
from tscope.ingest.logs.names import canonical_metric
from tscope.ingest.logs.table_columns import (
    find_column,
    is_bookkeeping_column,
    sniff_columns,
    to_long_form,
    unique_metric_names,
)
from tscope.ingest.logs.tabular import DELIMITERS, read_table
from tscope.model import Caveat, LogRead, PartialInput

RUN_METRIC_SEPARATOR = " - "
GROUP_PREFIX = "Group: "
# Suffix in the export -> suffix of the series tscope emits.
BUCKET_SUFFIXES = {"__MIN": "__min", "__MAX": "__max"}
# x-axis names that are steps: W&B's default "Step" is `_step`; custom x-axes are step metrics.
STEP_AXES = ("Step", "_step", "global_step", "trainer/global_step", "train/global_step", "step")
# W&B's reserved keys: counters and clocks, not metrics.
RESERVED_METRICS = frozenset({"_step", "_runtime", "_timestamp"})


def is_wandb_export(columns: list[str]) -> bool:
    """An x-axis column, then only `"<run> - <metric>[__MIN|__MAX]"` columns (empties aside)."""
    if len(columns) < 2 or RUN_METRIC_SEPARATOR in columns[0]:
        return False
    series = [name for name in columns[1:] if name.strip()]
    return bool(series) and all(RUN_METRIC_SEPARATOR in name for name in series)


def split_export_column(column: str) -> tuple[str, str, str]:
    """`"run - train/loss__MAX"` -> ("run", "train/loss", "__MAX")."""
    base, suffix = column, ""
    for marker in BUCKET_SUFFIXES:
        if column.endswith(marker):
            base, suffix = column[: -len(marker)], marker
    run, _, metric = base.rpartition(RUN_METRIC_SEPARATOR)
    return run.strip(), metric.strip(), suffix


class WandbExportReader:
    name = "wandb_export"

    def can_read(self, path: Path) -> bool:
        if path.suffix.lower() not in DELIMITERS:
            return False
        columns = sniff_columns(path)
        return columns is not None and is_wandb_export(columns)

    def read(self, path: Path, display_path: str) -> LogRead:
        header = sniff_columns(path)
        if header is None or not is_wandb_export(header):
            raise UnreadableInput(display_path, "not a W&B panel export (header changed?)")
        table = read_table(path, display_path)
        runs: dict[str, list[tuple[str, str, str]]] = {}
        for column in header[1:]:
            if column.strip():
                run, metric, suffix = split_export_column(column)
                runs.setdefault(run, []).append((column, metric, suffix))
        chosen = next(iter(runs))

        x_axis = header[0]
        run_step = f"{chosen}{RUN_METRIC_SEPARATOR}_step"
        if find_column([x_axis], STEP_AXES) is not None and x_axis in table.values:
            step_column = x_axis
        elif run_step in table.values:
            step_column = run_step
        else:
            raise UnreadableInput(
                display_path,
                f"the x-axis is {x_axis!r}, not a step, and no {run_step!r} column was exported",
                "Export the panel again with Step as the x-axis",
            )

        kept = [
            (column, metric, suffix)
            for column, metric, suffix in runs[chosen]
            if column in table.values
            and metric not in RESERVED_METRICS
            and not is_bookkeeping_column(metric)
        ]
        if not kept:
            raise UnreadableInput(display_path, f"no numeric metric column for run {chosen!r}")
        pairs = [
            (column, canonical_metric(metric) + BUCKET_SUFFIXES.get(suffix, ""))
            for column, metric, suffix in kept
        ]
        # Competing spellings are ranked by the metric's own name, not by `<run> - <metric>`.
        names = unique_metric_names(pairs, spellings=[metric for _, metric, _ in kept])
        metrics, step_problems = to_long_form(table, step_column, names, display_path)
        if metrics.empty:
            raise UnreadableInput(display_path, f"run {chosen!r} has no value with a usable step")

        problems = table.problems + step_problems
        ignored = [run for run in runs if run != chosen]
        if ignored:
            problems.append(
                f"the export holds {len(runs)} runs; tscope reads one run per file and read "
                f"{chosen!r} only, ignoring {', '.join(repr(run) for run in ignored)}. Export each "
                "run on its own to analyze it"
            )
        return LogRead(
            kind=self.name,
            path=display_path,
            metrics=metrics,
            caveats=_caveats(chosen, display_path),
            partial=[PartialInput(display_path, problem) for problem in problems],
        )


def _caveats(run: str, source: str) -> list[Caveat]:
    caveats = [
        Caveat(
            "downsampled_export",
            f"{source} is a W&B panel export: the panel buckets the steps and keeps the last "
            "value per bucket, so a one-step spike may be attenuated or missing from the main "
            "series; the bucket maxima (the `__max` series, e.g. train/loss__max) still show it.",
            source,
        )
    ]
    if run.startswith(GROUP_PREFIX):
        caveats.append(
            Caveat(
                "grouped_export",
                f"{source} holds the group {run[len(GROUP_PREFIX) :]!r}: each value aggregates "
                "the group's runs (the panel's group aggregation, mean by default), so a spike "
                "in one run is diluted.",
                source,
            )
        )
    return caveats
