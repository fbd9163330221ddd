"""DeepSpeed's CSV monitor (`csv_monitor` in the DeepSpeed config; deepspeed/monitor/csv_monitor.py).

One file per series in `<output_path>/<job_name>/`, named after the series with "/" and " " as "_"
(`Train_Samples_lr.csv`), holding a `step,<last part of the name>` header and one row per write.
The engine writes `Train/Samples/lr` and `/loss_scale` (and the pipeline engine
`Train/Samples/train_loss`) against the samples consumed, as its TensorBoard monitor does: read
as the generic table they were series at sample counts, 16× past the checkpoints of a batch-16
run. Here the file's series gets its tag back and the same samples-to-steps division as the
TensorBoard monitor's (tensorboard_tags.samples_axis_to_steps, with its caveat).
"""

from __future__ import annotations

from pathlib import Path

from tscope.errors import UnreadableInput
from tscope.ingest.logs.table_columns import sniff_columns, to_long_form
from tscope.ingest.logs.tabular import read_table
from tscope.ingest.readers.tensorboard_tags import (
    DEEPSPEED_SAMPLES_GROUP,
    DEEPSPEED_SAMPLES_SERIES,
    samples_axis_to_steps,
)
from tscope.model import LogRead, MetricTable, PartialInput, TextColumn

STEP_COLUMN = "step"
# File stem (the tag with "/" as "_") -> the tag, for the series the monitor writes against samples.
_TAG_OF_STEM = {tag.replace("/", "_"): tag for tag in DEEPSPEED_SAMPLES_SERIES}


def monitor_tag(path: Path) -> str | None:
    """The monitor series a file holds, from its name and header; None for any other file."""
    tag = _TAG_OF_STEM.get(path.stem) if path.suffix == ".csv" else None
    if tag is None:
        return None
    columns = sniff_columns(path)
    leaf = tag.removeprefix(DEEPSPEED_SAMPLES_GROUP)
    return tag if columns is not None and columns == [STEP_COLUMN, leaf] else None


class DeepSpeedCsvMonitorReader:
    name = "deepspeed_csv_monitor"

    def can_read(self, path: Path) -> bool:
        return monitor_tag(path) is not None

    def read(self, path: Path, display_path: str) -> LogRead:
        tag = monitor_tag(path)
        if tag is None:
            raise UnreadableInput(display_path, "not a DeepSpeed CSV monitor file")
        table = read_table(path, display_path)
        column = tag.removeprefix(DEEPSPEED_SAMPLES_GROUP)
        long, step_problems = to_long_form(
            table, STEP_COLUMN, [(column, DEEPSPEED_SAMPLES_SERIES[tag])], display_path
        )
        if long.empty:
            raise UnreadableInput(display_path, "no value has a usable step")
        tags = [tag]
        steps, caveats = samples_axis_to_steps(
            long.step, long.original_name.codes, tags, display_path
        )
        metrics = MetricTable(
            steps,
            long.metric,
            long.value,
            long.source,
            TextColumn(long.original_name.codes, tags),
            long.order,
        )
        return LogRead(
            kind=self.name,
            path=display_path,
            metrics=metrics,
            caveats=caveats,
            partial=[
                PartialInput(display_path, problem) for problem in table.problems + step_problems
            ],
        )
