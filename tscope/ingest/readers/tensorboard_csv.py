"""A scalar downloaded from TensorBoard's web UI: the scalars dashboard's "download CSV" link.

The header is `Wall time,Step,Value`, one tag per file, and only the file's name says which tag:
the dashboard names it `run-<run>-tag-<tag>.csv`, each "/" of the run and the tag written as "_"
(`run-version_0-tag-Loss_train.csv` for the PyTorch tutorial's `Loss/train`). Without this reader
such a file reached the generic table reader as one series called "Value", and a folder of them
(the loss, the LR and the gradient norm downloaded one by one) had no loss to judge.

The tag is read back from the name after the last `-tag-` (the whole stem when the file was
renamed): its own spelling when that names a known series (`train_loss`), else the first "_" read
as the "/" it replaced that makes a known name (`Loss_train` -> `Loss/train` -> the training loss,
`train_grad_norm` -> `train/grad_norm`); a tag that no reading makes known keeps its spelling.
"""

from __future__ import annotations

from pathlib import Path

from tscope.errors import UnreadableInput
from tscope.ingest.logs.names import canonical_metric, names_a_known_series
from tscope.ingest.logs.table_columns import sniff_columns, to_long_form
from tscope.ingest.logs.tabular import read_table
from tscope.model import LogRead, PartialInput

HEADER = ("wall time", "step", "value")
TAG_MARKER = "-tag-"
STEP_COLUMN = "Step"
VALUE_COLUMN = "Value"


def is_tensorboard_csv(columns: list[str]) -> bool:
    return tuple(name.strip().lower() for name in columns) == HEADER


def tag_of(file_name: str) -> str:
    """The tag as the file's name spells it: after the last `-tag-`, else the whole stem."""
    stem = Path(file_name).stem
    _, marker, tag = stem.rpartition(TAG_MARKER)
    return tag if marker and tag.strip() else stem


def metric_of(tag: str) -> str:
    """The canonical series for a tag whose "/" may have been written as "_" (module docstring)."""
    spelled = tag.strip()
    if names_a_known_series(spelled):
        return canonical_metric(spelled)
    for index, character in enumerate(spelled):
        if character == "_":
            candidate = f"{spelled[:index]}/{spelled[index + 1 :]}"
            if names_a_known_series(candidate):
                return canonical_metric(candidate)
    return spelled


class TensorBoardCsvReader:
    name = "tensorboard_csv"

    def can_read(self, path: Path) -> bool:
        columns = sniff_columns(path)
        return columns is not None and is_tensorboard_csv(columns)

    def read(self, path: Path, display_path: str) -> LogRead:
        table = read_table(path, display_path)
        by_role = {name.strip().lower(): name for name in table.names}
        step_column, value_column = by_role.get("step"), by_role.get("value")
        if step_column is None or value_column is None:
            raise UnreadableInput(
                display_path,
                "a TensorBoard CSV download whose Step or Value column holds no numbers",
                "Download the scalar again from TensorBoard, or point tscope at the event files",
            )
        tag = tag_of(path.name)
        if tag not in table.values:
            # The value column takes the tag's name: the series' original name, shown by it.
            table.values[tag] = table.values.pop(value_column)
            table.present[tag] = table.present.pop(value_column)
            table.names = [tag if name == value_column else name for name in table.names]
            value_column = tag
        metrics, step_problems = to_long_form(
            table, step_column, [(value_column, metric_of(tag))], display_path
        )
        if metrics.empty:
            raise UnreadableInput(display_path, "no value has a usable step")
        return LogRead(
            kind=self.name,
            path=display_path,
            metrics=metrics,
            partial=[
                PartialInput(display_path, problem) for problem in table.problems + step_problems
            ],
        )
